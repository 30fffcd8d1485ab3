package metrics

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/leaktest"
)

func TestRayletCollector(t *testing.T) {
	stats := RayletStats{
		ResourceCapacity: map[string]float64{"CPU": 4, "memory": 1 << 30},
		ResourceUsed:     map[string]float64{"CPU": 1.5, "memory": 0},
		StoreBytes:       4096, StoreObjects: 2, StoreCapacity: 1 << 20,
		SpilledBytes: 100, SpilledObjects: 1, SpilledBytesTotal: 300, RestoredBytesTotal: 200,
		PulledBytes: 7, PushedBytes: 9, PendingLeases: 3, InfeasibleLeases: 1, GrantedLeases: 2,
		Workers: map[string]int64{"IDLE": 2, "LEASED": 1}, MemoryKills: 4, WorkerDeathsDropped: 6,
	}
	c := RayletCollector(func() RayletStats { return stats })
	want := `
# HELP goray_node_resource_capacity What the node offers of each resource (CPU and GPU in units, memory and object_store_memory in bytes).
# TYPE goray_node_resource_capacity gauge
goray_node_resource_capacity{resource="CPU"} 4
goray_node_resource_capacity{resource="memory"} 1.073741824e+09
# HELP goray_node_resource_used What leases and placement group bundles hold of each of the node's resources, in the same units as goray_node_resource_capacity.
# TYPE goray_node_resource_used gauge
goray_node_resource_used{resource="CPU"} 1.5
goray_node_resource_used{resource="memory"} 0
# HELP goray_object_store_bytes Bytes of objects of the node by location: in_memory (the shared-memory store, all copies) or spilled (primary copies held only in spill storage).
# TYPE goray_object_store_bytes gauge
goray_object_store_bytes{location="in_memory"} 4096
goray_object_store_bytes{location="spilled"} 100
# HELP goray_memory_monitor_kills_total Workers the node's memory monitor killed because the node's memory use was above memory_monitor.usage_threshold.
# TYPE goray_memory_monitor_kills_total counter
goray_memory_monitor_kills_total 4
# HELP goray_object_transfer_bytes_total Object bytes moved between this node and others: pulled (received from another node) or pushed (served to another node).
# TYPE goray_object_transfer_bytes_total counter
goray_object_transfer_bytes_total{direction="pulled"} 7
goray_object_transfer_bytes_total{direction="pushed"} 9
# HELP goray_scheduler_infeasible_leases Queued lease requests no node of the cluster can ever satisfy as it is.
# TYPE goray_scheduler_infeasible_leases gauge
goray_scheduler_infeasible_leases 1
# HELP goray_worker_deaths_dropped_total Deaths of the node's drivers and workers another node was never told of, because the node's log of deaths not sent yet (8,192) overflowed first: that node keeps the dead process's objects and may keep it as a borrower.
# TYPE goray_worker_deaths_dropped_total counter
goray_worker_deaths_dropped_total 6
# HELP goray_workers Worker processes of the node by state (starting, idle, leased, actor).
# TYPE goray_workers gauge
goray_workers{state="ACTOR"} 0
goray_workers{state="IDLE"} 2
goray_workers{state="LEASED"} 1
goray_workers{state="STARTING"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"goray_memory_monitor_kills_total", "goray_node_resource_capacity", "goray_node_resource_used", "goray_object_store_bytes",
		"goray_object_transfer_bytes_total", "goray_scheduler_infeasible_leases", "goray_worker_deaths_dropped_total", "goray_workers"); err != nil {
		t.Fatal(err)
	}
	// Every metric the collector makes is one it describes (a registry
	// checks it), and the lint of client_golang finds nothing.
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	probs, err := testutil.CollectAndLint(c)
	if err != nil || len(probs) > 0 {
		t.Fatalf("lint: %v %v", err, probs)
	}
}

func TestClusterAndPluginCollectors(t *testing.T) {
	cases := []struct {
		name  string
		c     prometheus.Collector
		want  string
		names []string
	}{
		{"cluster", ClusterCollector(func() ClusterStats {
			return ClusterStats{Tasks: map[string]int64{"FINISHED": 20, "FAILED": 1}, Actors: map[string]int64{"ALIVE": 2}, StorageSetAside: 3}
		}), `
# HELP goray_tasks Tasks of the cluster by state, from the task events workers report to the GCS.
# TYPE goray_tasks gauge
goray_tasks{state="FAILED"} 1
goray_tasks{state="FINISHED"} 20
# HELP goray_actors Actors of the cluster by state (the GCS's actor table).
# TYPE goray_actors gauge
goray_actors{state="ALIVE"} 2
# HELP goray_gcs_storage_records_set_aside Records of the GCS's storage set aside in its quarantine table because they failed their checks when the GCS read the cluster back (see docs/security.md).
# TYPE goray_gcs_storage_records_set_aside gauge
goray_gcs_storage_records_set_aside 3
`, []string{"goray_tasks", "goray_actors", "goray_gcs_storage_records_set_aside"}},
		{"plugins", PluginCollector(func() []PluginStats {
			return []PluginStats{{Kind: "storage", Name: "s3", Restarts: 3, Up: true}, {Kind: "transport", Name: "shm"}}
		}), `
# HELP goray_plugin_restarts_total Times the node's plugin host restarted a plugin since the node started.
# TYPE goray_plugin_restarts_total counter
goray_plugin_restarts_total{kind="storage",name="s3"} 3
goray_plugin_restarts_total{kind="transport",name="shm"} 0
# HELP goray_plugin_up 1 when the plugin is running, else 0.
# TYPE goray_plugin_up gauge
goray_plugin_up{kind="storage",name="s3"} 1
goray_plugin_up{kind="transport",name="shm"} 0
`, []string{"goray_plugin_restarts_total", "goray_plugin_up"}},
		{"no plugins", PluginCollector(func() []PluginStats { return nil }), "", []string{"goray_plugin_up"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := testutil.CollectAndCompare(tc.c, strings.NewReader(tc.want), tc.names...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestNames(t *testing.T) {
	valid := regexp.MustCompile(`^goray_[a-z][a-z0-9_]*[a-z0-9]$`)
	seen := map[string]bool{}
	for _, n := range Names() {
		if !valid.MatchString(n) {
			t.Errorf("%q is not a goray metric name (goray_, snake_case)", n)
		}
		if seen[n] {
			t.Errorf("%q is defined twice", n)
		}
		seen[n] = true
	}
	// Every family a registry makes is in Names or the Go runtime's.
	r := NewRegistry("")
	if err := r.Register(RayletCollector(func() RayletStats { return RayletStats{} }), ClusterCollector(func() ClusterStats { return ClusterStats{} })); err != nil {
		t.Fatal(err)
	}
	r.ObserveSpill(1, time.Millisecond)
	r.ObserveRestore(1, time.Millisecond)
	mfs, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		n := mf.GetName()
		if !seen[n] && !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") {
			t.Errorf("the registry exports %q, which Names does not list", n)
		}
		if mf.GetType() == dto.MetricType_COUNTER && !strings.HasSuffix(n, "_total") {
			t.Errorf("counter %q does not end in _total", n)
		}
		if mf.GetType() != dto.MetricType_COUNTER && strings.HasSuffix(n, "_total") {
			t.Errorf("%s %q ends in _total, which is for counters", mf.GetType(), n)
		}
	}
}

func TestNilRegistry(t *testing.T) {
	var r *Registry
	if r.GRPCServerOptions() != nil {
		t.Fatal("a nil registry gives gRPC options")
	}
	r.ObserveSpill(1, time.Second)
	r.ObserveRestore(1, time.Second)
	r.AddGatherer(prometheus.NewRegistry())
	if err := r.Register(ClusterCollector(func() ClusterStats { return ClusterStats{} })); err != nil {
		t.Fatal(err)
	}
	if mfs, err := r.Gather(); err != nil || mfs != nil {
		t.Fatalf("Gather of a nil registry: %v %v", mfs, err)
	}
}

// scrape GETs url with token ("" sends none) through client.
func scrape(t *testing.T, client *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServerRequiresToken(t *testing.T) {
	leaktest.Goroutines(t)
	creds, err := auth.New("s3cret-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRegistry("")
	if err := r.Register(RayletCollector(func() RayletStats { return RayletStats{StoreBytes: 123} })); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Serve(lis, r, creds, nil)
	defer srv.Close(context.Background())
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	url := "http://" + srv.Addr() + Path
	cases := []struct {
		name, url, token string
		want             int
		body             string
	}{
		{"no token", url, "", http.StatusUnauthorized, "requires its token"},
		{"wrong token", url, "nope", http.StatusUnauthorized, "wrong token"},
		{"token", url, "s3cret-token", http.StatusOK, `goray_object_store_bytes{location="in_memory"} 123`},
		{"other path", "http://" + srv.Addr() + "/", "s3cret-token", http.StatusNotFound, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := scrape(t, client, tc.url, tc.token)
			if code != tc.want || !strings.Contains(body, tc.body) {
				t.Fatalf("status %d, want %d; body %.300q should contain %q", code, tc.want, body, tc.body)
			}
		})
	}
}

func TestServerTLS(t *testing.T) {
	leaktest.Goroutines(t)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca")
	if err := auth.CreateCA(ca, "test", time.Hour); err != nil {
		t.Fatal(err)
	}
	cert, key, err := auth.IssueCert(ca, filepath.Join(dir, "node"), "node", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	files := &auth.TLSFiles{CA: filepath.Join(ca, auth.CAFile), Cert: cert, Key: key}
	creds, err := auth.New("tok", files)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Serve(lis, NewRegistry(""), creds, nil)
	defer srv.Close(context.Background())
	pem, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	// Prometheus checks the node's certificate against the cluster's CA
	// and presents none of its own: the token authenticates it.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if code, body := scrape(t, client, "https://"+srv.Addr()+Path, "tok"); code != http.StatusOK || !strings.Contains(body, "goray_grpc") && !strings.Contains(body, "go_goroutines") {
		t.Fatalf("https scrape: %d %.200q", code, body)
	}
	if code, _ := scrape(t, client, "https://"+srv.Addr()+Path, ""); code != http.StatusUnauthorized {
		t.Fatalf("https scrape without the token: %d", code)
	}
	plain := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := plain.Get("http://" + srv.Addr() + Path); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("a plain HTTP scrape of a TLS cluster's node succeeded")
		}
	}
}

func TestUnixGatherer(t *testing.T) {
	leaktest.Goroutines(t)
	creds, err := auth.New("tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "m.sock")
	gcsReg := NewRegistry("gcs")
	if err := gcsReg.Register(ClusterCollector(func() ClusterStats { return ClusterStats{Tasks: map[string]int64{"FINISHED": 5}} })); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := Serve(lis, gcsReg, creds, nil)
	node := NewRegistry("")
	node.AddGatherer(UnixGatherer(path, creds))
	value := func(name string, labels map[string]string) (float64, bool) {
		t.Helper()
		mfs, err := node.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		metric:
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
						continue metric
					}
				}
				if m.GetGauge() != nil {
					return m.GetGauge().GetValue(), true
				}
				return m.GetCounter().GetValue(), true
			}
		}
		return 0, false
	}
	if v, ok := value("goray_tasks", map[string]string{"state": "FINISHED"}); !ok || v != 5 {
		t.Fatalf("goray_tasks{state=FINISHED} = %v, %v; want 5 from the other process", v, ok)
	}
	if v, _ := value("goray_gcs_up", nil); v != 1 {
		t.Fatalf("goray_gcs_up = %v while the GCS serves", v)
	}
	// Both processes' Go runtime metrics, told apart by component.
	if _, ok := value("go_goroutines", map[string]string{"component": "gcs"}); !ok {
		t.Fatal("no go_goroutines{component=gcs}")
	}
	if err := srv.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, ok := value("goray_gcs_up", nil); !ok || v != 0 {
		t.Fatalf("goray_gcs_up = %v, %v once the GCS is gone; want 0", v, ok)
	}
	if _, ok := value("goray_tasks", nil); ok {
		t.Fatal("goray_tasks still reported once the GCS is gone")
	}
}

func TestDiscovery(t *testing.T) {
	dir := t.TempDir()
	d := NewDiscovery(filepath.Join(dir, DiscoveryFile))
	nodes := []NodeTarget{
		{Address: "127.0.0.3:9101", NodeID: "bb", NodeName: "worker", Head: false},
		{Address: "127.0.0.2:9100", NodeID: "aa", NodeName: "head", Head: true},
	}
	read := func() []TargetGroup {
		t.Helper()
		b, err := os.ReadFile(d.Path())
		if err != nil {
			t.Fatal(err)
		}
		var g []TargetGroup
		if err := json.Unmarshal(b, &g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	if err := d.Update(TargetGroups(nodes, false)); err != nil {
		t.Fatal(err)
	}
	g := read()
	if len(g) != 2 || g[0].Targets[0] != "127.0.0.2:9100" || g[0].Labels[TargetNodeID] != "aa" || g[0].Labels[TargetHead] != "true" ||
		g[1].Labels[TargetNodeName] != "worker" || g[1].Labels["__scheme__"] != "" {
		t.Fatalf("discovery file: %+v", g)
	}
	if err := d.Update(TargetGroups(nodes[:1], true)); err != nil {
		t.Fatal(err)
	}
	if g := read(); len(g) != 1 || g[0].Labels["__scheme__"] != "https" {
		t.Fatalf("after a node left, with TLS: %+v", g)
	}
	if err := d.Update(nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(d.Path()); strings.TrimSpace(string(b)) != "[]" {
		t.Fatalf("no nodes: %q, want []", b)
	}
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(); err != nil {
		t.Fatalf("removing twice: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(d.Path())); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}
