package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// result is what one goray invocation did.
type result struct {
	code           int
	stdout, stderr string
}

// runGoray runs the built binary without $GORAY_ADDRESS.
func runGoray(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(goray, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envAddress+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running goray %q: %v", args, err)
	}
	return r
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// processesMentioning returns the pids whose command line contains s.
func processesMentioning(s string) []int {
	p := procFS{"/proc"}
	pids, _ := p.pids()
	var out []int
	for _, pid := range pids {
		args, err := p.cmdline(pid)
		if err == nil && strings.Contains(strings.Join(args, " "), s) {
			out = append(out, pid)
		}
	}
	return out
}

func TestEndToEnd(t *testing.T) {
	// Short: unix socket paths under it must stay below 108 bytes.
	tmp, err := os.MkdirTemp("", "gr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		runGoray(t, "stop", "--temp-dir", tmp, "--force")
		os.RemoveAll(tmp)
	})
	port := strconv.Itoa(freePort(t))
	addr := "127.0.0.1:" + port

	// The dashboard on a free port: a busy 8265 (another test's head) is an error.
	r := runGoray(t, "start", "--head", "--port", port, "--temp-dir", tmp, "--object-store-memory", "64MiB", "--dashboard-port", "-1")
	if r.code != 0 {
		t.Fatalf("start: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "export GORAY_ADDRESS="+addr) {
		t.Errorf("start output lacks the connect hint:\n%s", r.stdout)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "goray-start-*")); len(left) != 0 {
		t.Errorf("start left %v behind", left)
	}

	r = runGoray(t, "status", "--json", "--temp-dir", tmp)
	if r.code != 0 {
		t.Fatalf("status: exit %d\n%s", r.code, r.stderr)
	}
	var st struct {
		GCSAddress string `json:"gcs_address"`
		AliveNodes int    `json:"alive_nodes"`
		Nodes      []struct {
			State  string `json:"state"`
			IsHead bool   `json:"is_head"`
		} `json:"nodes"`
		Cluster struct {
			ResourcesTotal map[string]float64 `json:"resources_total"`
		} `json:"cluster"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if st.GCSAddress != addr || st.AliveNodes != 1 || len(st.Nodes) != 1 || !st.Nodes[0].IsHead || st.Nodes[0].State != "ALIVE" {
		t.Errorf("status %+v, want one alive head at %s", st, addr)
	}
	if st.Cluster.ResourcesTotal["CPU"] <= 0 {
		t.Errorf("cluster CPU total %v, want > 0", st.Cluster.ResourcesTotal["CPU"])
	}

	r = runGoray(t, "list", "nodes", "--json", "--address", addr)
	var ln struct {
		Nodes []struct {
			NodeID string `json:"node_id"`
			State  string `json:"state"`
		} `json:"nodes"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &ln) != nil || len(ln.Nodes) != 1 || ln.Nodes[0].State != "ALIVE" {
		t.Errorf("list nodes: exit %d, %+v\nstdout: %s\nstderr: %s", r.code, ln, r.stdout, r.stderr)
	}

	// A second node joins the head.
	r = runGoray(t, "start", "--address", addr, "--temp-dir", tmp, "--object-store-memory", "64MiB", "--node-name", "second", "--resources", "disk=2")
	if r.code != 0 || !strings.Contains(r.stdout, "Started goray node") {
		t.Fatalf("join: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = runGoray(t, "status", "--temp-dir", tmp)
	if r.code != 0 || !strings.Contains(r.stdout, "2 nodes alive") || !strings.Contains(r.stdout, "disk 2/2") {
		t.Errorf("status with two nodes: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	// The port is taken now.
	r = runGoray(t, "start", "--head", "--port", port, "--temp-dir", tmp, "--dashboard-port", "-1")
	if r.code != 1 || !strings.Contains(r.stderr, addr+" is already in use") {
		t.Errorf("second start: exit %d, want 1 naming %s\nstderr: %s", r.code, addr, r.stderr)
	}
	if strings.Count(r.stderr, "Error:") != 1 {
		t.Errorf("second start printed the error %d times:\n%s", strings.Count(r.stderr, "Error:"), r.stderr)
	}

	r = runGoray(t, "stop", "--temp-dir", tmp)
	if r.code != 0 || !strings.Contains(r.stdout, "Stopped goray head node") || !strings.Contains(r.stdout, "Stopped goray node") {
		t.Fatalf("stop: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if !poll(10*time.Second, func() bool { return len(processesMentioning(tmp)) == 0 }) {
		t.Errorf("processes %v still mention %s after stop", processesMentioning(tmp), tmp)
	}
	if socks, _ := filepath.Glob(filepath.Join(tmp, "session_*", "sockets")); len(socks) != 0 {
		t.Errorf("sockets left after stop: %v", socks)
	}

	r = runGoray(t, "stop", "--temp-dir", tmp)
	if r.code != 0 || !strings.Contains(r.stdout, "No running goray nodes") {
		t.Errorf("second stop: exit %d\n%s", r.code, r.stdout)
	}
	r = runGoray(t, "status", "--temp-dir", tmp)
	if r.code != 1 || !strings.Contains(r.stderr, "no running goray cluster found") {
		t.Errorf("status after stop: exit %d\n%s", r.code, r.stderr)
	}
}
