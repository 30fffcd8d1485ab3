package node

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/metrics"
)

// TestNodeMetrics: a head serves its metrics on node_ip behind the token,
// with the GCS's (in its process, or read from the GCS process), lists
// itself in the discovery file, and removes the file and closes the
// endpoint when it stops; with metrics off it serves none.
func TestNodeMetrics(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		gcsCmd   []string
		disabled bool
		want     []string
	}{
		{"gcs in process", nil, false, []string{`goray_tasks{state="FINISHED"} 0`, `goray_nodes{state="ALIVE"} 1`,
			`goray_node_resource_capacity{resource="CPU"} 1`, `grpc_service="goray.v1.Gcs"`, "goray_object_store_capacity_bytes 3.3554432e+07"}},
		{"gcs process", []string{exe}, false, []string{`goray_tasks{state="FINISHED"} 0`, `goray_nodes{state="ALIVE"} 1`,
			"goray_gcs_up 1", `go_goroutines{component="gcs"}`, `grpc_service="goray.v1.Gcs"`, `goray_workers{state="IDLE"} 0`}},
		{"disabled", nil, true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envRunGCS, "1") // what the GCS command of these tests runs
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cfg := testConfig(shortTempDir(t))
			cfg.Metrics.Disabled = tc.disabled
			n, err := Start(ctx, Options{Config: cfg, GCSCommand: tc.gcsCmd})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Stop(context.Background())
			info := n.Info()
			if tc.disabled {
				if info.MetricsAddress != "" || info.MetricsDiscoveryFile != "" {
					t.Fatalf("metrics off, yet %q and %q", info.MetricsAddress, info.MetricsDiscoveryFile)
				}
				return
			}
			if !strings.HasPrefix(info.MetricsAddress, "127.0.0.1:") {
				t.Fatalf("metrics address %q, want on node_ip 127.0.0.1", info.MetricsAddress)
			}
			var groups []metrics.TargetGroup
			b, err := os.ReadFile(info.MetricsDiscoveryFile)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &groups); err != nil {
				t.Fatal(err)
			}
			if len(groups) != 1 || groups[0].Targets[0] != info.MetricsAddress || groups[0].Labels[metrics.TargetNodeID] != n.ID().String() {
				t.Fatalf("discovery file lists %+v, want this node at %s", groups, info.MetricsAddress)
			}
			get := func(token string) (int, string) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+info.MetricsAddress+metrics.Path, nil)
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(body)
			}
			if code, _ := get(""); code != http.StatusUnauthorized {
				t.Fatalf("scrape without the token: %d", code)
			}
			code, body := get(n.Auth().Token())
			if code != http.StatusOK {
				t.Fatalf("scrape: %d %.300s", code, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("the node's metrics lack %s", w)
				}
			}
			if err := n.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(info.MetricsDiscoveryFile); !os.IsNotExist(err) {
				t.Fatalf("the discovery file is left after Stop: %v", err)
			}
			if _, err := http.Get("http://" + info.MetricsAddress + metrics.Path); err == nil {
				t.Fatal("the endpoint still answers after Stop")
			}
			if _, err := os.Stat(filepath.Join(info.SessionDir, "sockets", gcsMetricsSocket)); !os.IsNotExist(err) {
				t.Fatalf("the GCS's metrics socket is left: %v", err)
			}
		})
	}
}

// TestGCSMetricsSocketRefusesStrangers: the unix socket the GCS process
// serves its metrics on to the head's node checks the cluster token too.
func TestGCSMetricsSocketRefusesStrangers(t *testing.T) {
	creds, err := auth.New("gcs-metrics-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(shortTempDir(t), "m.sock")
	stop, err := serveGCSMetrics(path, metrics.NewRegistry("gcs"), creds, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
	defer client.CloseIdleConnections()
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {"wrong", http.StatusUnauthorized}, {"gcs-metrics-token", http.StatusOK}} {
		req, err := http.NewRequest(http.MethodGet, "http://gcs"+metrics.Path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET with token %q: %d, want %d", tc.token, resp.StatusCode, tc.want)
		}
	}
}
