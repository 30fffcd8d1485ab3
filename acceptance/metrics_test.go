package acceptance

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/metrics"
	"github.com/goray-dev/goray/internal/testservers/promtest"
)

// metricsNodeJSON is the metrics part of a session's node.json.
type metricsNodeJSON struct {
	NodeID        string `json:"node_id"`
	Address       string `json:"metrics_address"`
	DiscoveryFile string `json:"metrics_discovery_file"`
}

func readMetricsJSON(t *testing.T, session string) metricsNodeJSON {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(session, "node.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m metricsNodeJSON
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// scrapeNode GETs a node's /metrics, with the cluster token when
// withToken, and returns the status and body.
func scrapeNode(t *testing.T, ctx context.Context, addr string, withToken bool) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+metrics.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if withToken {
		tok, err := os.ReadFile(tokenPath)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scraping %s: %v", addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// documentedScrapeConfig is the scrape config of docs/metrics.md with its
// paths filled in and its interval 1s (scrape_timeout must not exceed it).
func documentedScrapeConfig(t *testing.T, tokenFile, sdFile string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/metrics.md has no yaml block")
	}
	conf := string(m[1])
	for _, r := range [][2]string{
		{"/home/me/.goray/auth_token", tokenFile},
		{"/tmp/goray/session_latest/metrics/prometheus_sd.json", sdFile},
		{"scrape_interval: 15s", "scrape_interval: 1s\n    scrape_timeout: 1s"},
	} {
		if !strings.Contains(conf, r[0]) {
			t.Fatalf("the yaml block of docs/metrics.md no longer has %q:\n%s", r[0], conf)
		}
		conf = strings.ReplaceAll(conf, r[0], r[1])
	}
	return "global:\n  evaluation_interval: 1s\n" + conf + "        refresh_interval: 1s\n"
}

// TestMetricsPrometheus: Debian's Prometheus finds a head and a worker
// node through the head's discovery file, scrapes both with the token
// (both up), and after a known workload (10 tasks on each node, an 8 MiB
// put on the head) PromQL gives 20 finished tasks and at least 8 MiB in
// the head's object store. It also checks that docs/metrics.md lists
// exactly the metrics goray defines and every goray metric the nodes
// export, and that the Grafana dashboard queries only those.
func TestMetricsPrometheus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := startClusterHead(t, ctx)
	wcfg := writeConfig(t, shortTempDir(t), fmt.Sprintf("plugin_dir = %q\nplugin \"transport\" \"shm\" {}\n", pluginDir))
	w := joinNode(t, ctx, h, "127.0.0.2", "", "--config", wcfg)
	hm, wm := readMetricsJSON(t, h.session), readMetricsJSON(t, w.session)
	if !strings.HasPrefix(hm.Address, "127.0.0.1:") || !strings.HasPrefix(wm.Address, "127.0.0.2:") {
		t.Fatalf("metrics addresses %q and %q, want on the nodes' IPs", hm.Address, wm.Address)
	}
	if hm.DiscoveryFile != filepath.Join(h.session, metrics.DiscoveryFile) {
		t.Fatalf("discovery file %q", hm.DiscoveryFile)
	}
	// The endpoint refuses a scrape without the token.
	for _, addr := range []string{hm.Address, wm.Address} {
		if code, body := scrapeNode(t, ctx, addr, false); code != http.StatusUnauthorized {
			t.Fatalf("scrape of %s without the token: %d %.200s", addr, code, body)
		}
		if code, _ := scrapeNode(t, ctx, addr, true); code != http.StatusOK {
			t.Fatalf("scrape of %s with the token: %d", addr, code)
		}
	}
	// `goray status` says where the discovery file is.
	if r := runGoray(t, ctx, "status", "--temp-dir", h.tempDir); r.code != 0 || !strings.Contains(r.stdout, "Prometheus file_sd targets: "+hm.DiscoveryFile) {
		t.Fatalf("goray status does not name the discovery file:\n%s", r)
	}

	prom := promtest.Start(t, promtest.Options{Config: documentedScrapeConfig(t, tokenPath, hm.DiscoveryFile)})
	const size = 8 << 20
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "metrics", w.id, dir, "10", strconv.Itoa(size))
	waitFile(t, j, time.Minute, filepath.Join(dir, "ready"))

	byNode := func(samples []promtest.Sample) map[string]float64 {
		m := map[string]float64{}
		for _, s := range samples {
			m[s.Metric["node_id"]] = s.Value
		}
		return m
	}
	checks := []struct {
		query string
		want  string
		ok    func([]promtest.Sample) bool
	}{
		{`up{job="goray"}`, "1 for both nodes", func(s []promtest.Sample) bool {
			m := byNode(s)
			return len(m) == 2 && m[hm.NodeID] == 1 && m[wm.NodeID] == 1
		}},
		{`sum(goray_tasks{state="FINISHED"})`, "20", func(s []promtest.Sample) bool { return len(s) == 1 && s[0].Value == 20 }},
		{fmt.Sprintf(`goray_object_store_bytes{location="in_memory",node_id=%q}`, hm.NodeID), fmt.Sprintf(">= %d", size),
			func(s []promtest.Sample) bool { return len(s) == 1 && s[0].Value >= size }},
		{`goray_node_resource_capacity{resource="CPU"}`, "2 on each node", func(s []promtest.Sample) bool {
			m := byNode(s)
			return len(m) == 2 && m[hm.NodeID] == 2 && m[wm.NodeID] == 2
		}},
		{`goray_plugin_up{kind="transport",name="shm"}`, "1 on the worker node", func(s []promtest.Sample) bool {
			m := byNode(s)
			return len(m) == 1 && m[wm.NodeID] == 1
		}},
	}
	for _, c := range checks {
		var last []promtest.Sample
		for {
			s, err := prom.Query(ctx, c.query)
			if err != nil {
				t.Fatal(err)
			}
			if c.ok(s) {
				break
			}
			last = s
			select {
			case <-ctx.Done():
				t.Fatalf("%s = %+v, want %s\nprometheus log:\n%s", c.query, last, c.want, prom.Log(20))
			case <-time.After(200 * time.Millisecond): // polling interval
			}
		}
		t.Logf("%s: %s", c.query, c.want)
	}

	// What the nodes export, what docs/metrics.md lists, what goray
	// defines and what the dashboard queries agree.
	exported := map[string]bool{}
	for _, addr := range []string{hm.Address, wm.Address} {
		_, body := scrapeNode(t, ctx, addr, true)
		for name := range families(body) {
			exported[name] = true
		}
	}
	documented, docText := documentedMetrics(t)
	defined := metrics.Names()
	slices.Sort(defined)
	docNames := slices.Sorted(maps.Keys(documented))
	if !slices.Equal(defined, docNames) {
		t.Errorf("docs/metrics.md lists %v;\ngoray defines %v", docNames, defined)
	}
	for name := range exported {
		switch {
		case strings.HasPrefix(name, "go_"), strings.HasPrefix(name, "process_"):
			if !strings.Contains(docText, "`go_*`") || !strings.Contains(docText, "`process_*`") {
				t.Errorf("docs/metrics.md does not describe %s (go_* and process_*)", name)
			}
		case !documented[name]:
			t.Errorf("a node exports %s, which docs/metrics.md does not list", name)
		}
	}
	for _, name := range dashboardMetrics(t) {
		if name == "up" {
			continue // Prometheus's own
		}
		base := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suf); ok && (documented[b] || exported[b]) {
				base = b
			}
		}
		if !documented[base] && !strings.HasPrefix(base, "go_") && !strings.HasPrefix(base, "process_") {
			t.Errorf("the dashboard queries %s, which docs/metrics.md does not list", name)
		}
		if !exported[base] {
			t.Errorf("the dashboard queries %s, which no node exports", name)
		}
	}

	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("job exit %d:\n%s", code, out)
	}
}

// families returns the metric families of a Prometheus text exposition
// and their types.
func families(body string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = f[3]
		}
	}
	return out
}

// documentedMetrics returns the metrics the tables of docs/metrics.md
// list, and the document.
func documentedMetrics(t *testing.T) (map[string]bool, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_:][a-z0-9_:]*)` \\| (gauge|counter|histogram) \\|").FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	return out, string(b)
}

// dashboardMetrics returns the metric names the Grafana dashboard's
// queries use.
func dashboardMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "grafana", "goray-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("docs/grafana/goray-dashboard.json: %v", err)
	}
	// goray's, the Go runtime's and the process's metric names, and
	// Prometheus's up.
	re := regexp.MustCompile(`\b(goray_[a-z0-9_]+|go_[a-z0-9_]+|process_[a-z0-9_]+|up)\b`)
	seen := map[string]bool{}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, m := range re.FindAllString(tg.Expr, -1) {
				if !seen[m] {
					seen[m] = true
					out = append(out, m)
				}
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("the dashboard queries only %v", out)
	}
	return out
}
