// Package awstest is what the AWS provider's tests share: building the
// goray CLI, starting a real head with it and asking it for the cluster's
// status, a stand-in for the EC2 instance metadata service (IMDSv2) and a
// file server, so that an instance's user data can run on this machine,
// and checks that nothing of a node is left behind. The EC2 API itself is
// moto's (internal/testservers/mototest, which the tests import).
package awstest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ModuleRoot returns the directory of the goray module.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Build builds the package pkg of the module (such as "./cmd/goray")
// into dir/name and returns its path.
func Build(dir, pkg, name string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// ShortTempDir makes a temp dir with a short path (unix socket paths under
// it must stay within 107 bytes) and removes it when the test ends.
func ShortTempDir(t testing.TB, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// Head is a head node started with `goray start --head`.
type Head struct {
	// Goray is the CLI binary.
	Goray string
	// Dir is its temp dir.
	Dir string
	// Addr is the GCS address, 127.0.0.1:<port>.
	Addr string
	// TokenPath is the cluster token file (GORAY_AUTH_TOKEN_PATH of every
	// command); Token its content.
	TokenPath, Token string
}

// Env is this process's environment without GORAY_* variables, plus the
// head's token file: what every goray command of the test runs with.
func (h *Head) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GORAY_") {
			env = append(env, kv)
		}
	}
	return append(env, "GORAY_AUTH_TOKEN_PATH="+h.TokenPath)
}

// Run runs the goray CLI with args and returns its stdout, or an error
// with its output.
func (h *Head) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, h.Goray, args...)
	cmd.Env = h.Env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("goray %s: %w\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// StartHead starts a head under a fresh temp dir, with its token file in
// another, and stops it (and removes both) when the test ends.
func StartHead(ctx context.Context, t testing.TB, goray string) *Head {
	t.Helper()
	h := &Head{Goray: goray, Dir: ShortTempDir(t, "gah")}
	auth := ShortTempDir(t, "gaa")
	h.TokenPath = filepath.Join(auth, "token")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	h.Addr = "127.0.0.1:" + strconv.Itoa(port)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := h.Run(ctx, "stop", "--temp-dir", h.Dir, "--force"); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	if _, err := h.Run(ctx, "start", "--head", "--port", strconv.Itoa(port), "--temp-dir", h.Dir, "--num-cpus", "1", "--object-store-memory", "64MiB"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(h.TokenPath)
	if err != nil {
		t.Fatalf("the head's token: %v", err)
	}
	h.Token = strings.TrimSpace(string(b))
	return h
}

// Node is a node of `goray status --json`.
type Node struct {
	// NodeID, NodeName, State ("ALIVE", "DEAD"), IsHead, Pid,
	// SessionDir and Labels are as `goray status --json` shows them.
	NodeID     string            `json:"node_id"`
	NodeName   string            `json:"node_name"`
	State      string            `json:"state"`
	IsHead     bool              `json:"is_head"`
	Pid        int               `json:"pid"`
	SessionDir string            `json:"session_dir"`
	Labels     map[string]string `json:"labels"`
}

// Status is the part of `goray status --json` the tests read.
type Status struct {
	// AliveNodes counts the alive nodes.
	AliveNodes int `json:"alive_nodes"`
	// Nodes are every node, alive first.
	Nodes []Node `json:"nodes"`
}

// Status runs `goray status --json` against the head.
func (h *Head) Status(ctx context.Context) (Status, error) {
	out, err := h.Run(ctx, "status", "--json", "--address", h.Addr)
	if err != nil {
		return Status{}, err
	}
	var s Status
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return Status{}, fmt.Errorf("goray status --json: %v\n%s", err, out)
	}
	return s, nil
}

// IMDS is a stand-in for the EC2 instance metadata service, IMDSv2 only:
// GET needs the token a PUT of /latest/api/token gave.
type IMDS struct {
	// URL is where it listens, http://127.0.0.1:<port>.
	URL string

	mu         sync.Mutex
	instanceID string
	ip         string
	plainGets  int
}

// StartIMDS starts an IMDS that says the instance is instanceID with
// private IP ip; it stops when the test ends.
func StartIMDS(t testing.TB, instanceID, ip string) *IMDS {
	t.Helper()
	m := &IMDS{instanceID: instanceID, ip: ip}
	const token = "awstest-imds-token"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			if r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") == "" {
				http.Error(w, "no ttl", http.StatusBadRequest)
				return
			}
			_, _ = w.Write([]byte(token))
			return
		case r.Method != http.MethodGet:
			http.Error(w, "method", http.StatusMethodNotAllowed)
			return
		case r.Header.Get("X-aws-ec2-metadata-token") != token:
			m.mu.Lock()
			m.plainGets++
			m.mu.Unlock()
			http.Error(w, "IMDSv2 only", http.StatusUnauthorized)
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		switch r.URL.Path {
		case "/latest/meta-data/instance-id":
			_, _ = w.Write([]byte(m.instanceID))
		case "/latest/meta-data/local-ipv4":
			_, _ = w.Write([]byte(m.ip))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	m.URL = srv.URL
	return m
}

// PlainGets returns how many GETs came without an IMDSv2 token.
func (m *IMDS) PlainGets() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.plainGets
}

// FileServer serves one file over HTTP, counting the downloads.
type FileServer struct {
	// URL is the file's URL.
	URL string

	mu    sync.Mutex
	count int
}

// ServeFile serves the file at path as URL/name until the test ends.
func ServeFile(t testing.TB, path, name string) *FileServer {
	t.Helper()
	f := &FileServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/"+name {
			http.NotFound(w, r)
			return
		}
		f.mu.Lock()
		f.count++
		f.mu.Unlock()
		http.ServeFile(w, r, path)
	}))
	t.Cleanup(srv.Close)
	f.URL = srv.URL + "/" + name
	return f
}

// Downloads returns how many times the file was asked for.
func (f *FileServer) Downloads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count
}

// Processes returns the live processes (other than this one) whose
// command line or environment mentions dir, as "pid: command line".
func Processes(dir string) []string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil || zombie(st) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		var hit bool
		for _, part := range append(bytes.Split(cmdline, []byte{0}), bytes.Split(environ, []byte{0})...) {
			if bytes.HasPrefix(part, []byte("PWD=")) || bytes.HasPrefix(part, []byte("OLDPWD=")) {
				continue
			}
			if s := string(part); strings.Contains(s, dir+"/") || strings.HasSuffix(s, dir) {
				hit = true
			}
		}
		if hit {
			out = append(out, fmt.Sprintf("%d: %s", pid, strings.ReplaceAll(string(bytes.TrimRight(cmdline, "\x00")), "\x00", " ")))
		}
	}
	return out
}

func zombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

// KillAll kills every process that mentions dir (the last resort of a
// test's cleanup) and returns what it killed.
func KillAll(dir string) []string {
	left := Processes(dir)
	for _, p := range left {
		pid, _ := strconv.Atoi(strings.SplitN(p, ":", 2)[0])
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return left
}

// Eventually polls cond every 50 ms (a polling interval, not
// synchronisation) until it returns nil or ctx ends, and returns its last
// error.
func Eventually(ctx context.Context, cond func() error) error {
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
