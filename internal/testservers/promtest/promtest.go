// Package promtest runs a real Prometheus server for a test (Debian's
// prometheus package; `make prometheus` installs it): on 127.0.0.1 at a
// free port, with its data and config in a temporary directory, scraping
// every second the targets a file_sd file lists (a goray head's
// <session>/metrics/prometheus_sd.json) with the cluster's token, and
// stopped, leaving nothing, when the test ends. Query runs PromQL through
// its HTTP API.
package promtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/spawn"
	"github.com/goray-dev/goray/internal/testservers/freeport"
	"github.com/goray-dev/goray/internal/testservers/testbin"
)

// EnvBinary names the environment variable that overrides where the
// prometheus binary is.
const EnvBinary = "GORAY_PROMETHEUS"

// startTimeout bounds a start.
const startTimeout = 60 * time.Second

// Binary returns the prometheus binary: $GORAY_PROMETHEUS, else
// prometheus on $PATH. The error says how to install it.
func Binary() (string, error) {
	return testbin.Find(testbin.Spec{What: "prometheus", Env: EnvBinary, Commands: []string{"prometheus"},
		Install: "run `make prometheus` (it installs Debian's prometheus package)"})
}

// Options say what the server scrapes.
type Options struct {
	// DiscoveryFile is the file_sd file of the targets (required unless
	// Config is set).
	DiscoveryFile string
	// TokenFile holds the bearer token sent with every scrape ("": none).
	TokenFile string
	// CAFile, when set, is the CA the targets' certificates are checked
	// against (targets whose discovery labels say __scheme__ https).
	CAFile string
	// Config, when set, is the whole prometheus.yml, used as it is instead
	// of the one Config(o) makes (a documented config under test).
	Config string
}

// Server is a running Prometheus of a test.
type Server struct {
	// URL is the server's base URL (http://127.0.0.1:port).
	URL string
	// Dir holds the config, the data and the log.
	Dir string

	t    testing.TB
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a server scraping o's targets every second and stops it at
// t's cleanup. A missing binary fails t with how to install it.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("promtest: %v", err)
	}
	text := o.Config
	if text == "" {
		if o.DiscoveryFile == "" {
			t.Fatal("promtest: Options.DiscoveryFile or Options.Config is required")
		}
		text = Config(o)
	}
	s := &Server{t: t, Dir: t.TempDir()}
	conf := filepath.Join(s.Dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	err = freeport.Start(1, nil, func(ports []int) error {
		return s.start(bin, conf, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
	})
	if err != nil {
		t.Fatalf("promtest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Config is the prometheus.yml of a server for o: one job, goray,
// scraping every second the targets of o.DiscoveryFile, re-read every
// second (Prometheus also watches it).
func Config(o Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n")
	fmt.Fprintf(&b, "scrape_configs:\n  - job_name: goray\n")
	if o.TokenFile != "" {
		fmt.Fprintf(&b, "    authorization:\n      credentials_file: %s\n", strconv.Quote(o.TokenFile))
	}
	if o.CAFile != "" {
		fmt.Fprintf(&b, "    tls_config:\n      ca_file: %s\n", strconv.Quote(o.CAFile))
	}
	fmt.Fprintf(&b, "    file_sd_configs:\n      - files: [%s]\n        refresh_interval: 1s\n", strconv.Quote(o.DiscoveryFile))
	return b.String()
}

func (s *Server) start(bin, conf, addr string) error {
	logPath := filepath.Join(s.Dir, "prometheus.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(s.Dir, "data"),
		"--web.listen-address="+addr, "--log.level=info")
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group, and killed when this process dies however it
	// dies (spawn.Start makes Pdeathsig reliable).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn.Start(cmd); err != nil {
		return fmt.Errorf("starting %s: %w", bin, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	s.URL = "http://" + addr
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("prometheus at %s exited at start: %s", addr, lastLines(readFile(logPath), 5))
		default:
		}
		if resp, err := client.Get(s.URL + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	s.kill()
	return fmt.Errorf("prometheus at %s was not ready within %s: %s", addr, startTimeout, lastLines(readFile(logPath), 5))
}

// Stop stops the server (SIGTERM, then SIGKILL after 10 s) and waits for
// it. Idempotent.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.kill()
	}
	s.cmd = nil
}

func (s *Server) kill() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

// Log returns the last lines of the server's log, for failure messages.
func (s *Server) Log(lines int) string {
	return lastLines(readFile(filepath.Join(s.Dir, "prometheus.log")), lines)
}

// Sample is one series of an instant query's result.
type Sample struct {
	Metric map[string]string
	Value  float64
}

// Query evaluates the PromQL expression q now (GET /api/v1/query) and
// returns its vector result; a query error names the expression.
func (s *Server) Query(ctx context.Context, q string) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", q, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", q, err)
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("query %q: %s: %w", q, resp.Status, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", q, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: a %s, not an instant vector", q, r.Data.ResultType)
	}
	out := make([]Sample, 0, len(r.Data.Result))
	for _, v := range r.Data.Result {
		str, _ := v.Value[1].(string)
		f, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %v: %w", q, v.Value[1], err)
		}
		out = append(out, Sample{Metric: v.Metric, Value: f})
	}
	return out, nil
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
