// Package sshtest is what the SSH provider's tests share: building the
// goray CLI, starting a real head with it, SSH hosts (the addresses of a
// real sshd the test starts with internal/testservers/sshdtest) with a
// provider config for them, stand-in goray binaries, and checks that
// nothing of an instance is left behind.
package sshtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/plugins/ssh/sshprovider"
)

// moduleRoot returns the directory of the goray module.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// BuildGoray builds the goray CLI (./cmd/goray) into dir and returns its
// path.
func BuildGoray(dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "goray")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/goray")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/goray: %w\n%s", err, b)
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

// FreePort returns a TCP port free on ip now.
func FreePort(t testing.TB, ip string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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
	h := &Head{Goray: goray, Dir: ShortTempDir(t, "gsh")}
	auth := ShortTempDir(t, "gsa")
	h.TokenPath = filepath.Join(auth, "token")
	port := FreePort(t, "127.0.0.1")
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
	// NodeID, NodeName, State ("ALIVE", "DEAD"), IsHead, Pid and Labels
	// are as `goray status --json` shows them.
	NodeID   string            `json:"node_id"`
	NodeName string            `json:"node_name"`
	State    string            `json:"state"`
	IsHead   bool              `json:"is_head"`
	Pid      int               `json:"pid"`
	Labels   map[string]string `json:"labels"`
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

// AliveNode returns the alive node whose instance label is id.
func (s Status) AliveNode(id string) (Node, bool) {
	for _, n := range s.Nodes {
		if n.State == "ALIVE" && n.Labels["goray.io/instance-id"] == id {
			return n, true
		}
	}
	return Node{}, false
}

// WriteScript writes an executable shell script named name into dir and
// returns its path.
func WriteScript(t testing.TB, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// FailingGoray is a stand-in goray that prints a line and exits with
// status 3, as a node that cannot start.
func FailingGoray(t testing.TB, dir string) string {
	return WriteScript(t, dir, "failing-goray", "echo 'goray-test: the node cannot start' >&2\nexit 3\n")
}

// Hosts are SSH hosts for a test (the addresses of a real sshd the test
// started, internal/testservers/sshdtest), and a root directory under
// which every host has its own remote_dir (Root/<address>).
type Hosts struct {
	// Addrs are the hosts, host:port.
	Addrs []string
	// User, KeyFile and KnownHostsFile are how to log in to them.
	User, KeyFile, KnownHostsFile string
	// Root holds the hosts' remote_dirs: a provider config's remote_dir
	// is Root/{host}.
	Root string
}

// NewHosts returns the hosts at addrs (an sshd's addresses) with a fresh
// Root. When the test ends, any process still running under Root fails
// the test and is killed, and Root is removed (call it after starting the
// sshd, so this happens before the sshd stops).
func NewHosts(t testing.TB, addrs []string, user, keyFile, knownHosts string) *Hosts {
	t.Helper()
	root, err := os.MkdirTemp("", "s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if left := KillAll(root); len(left) > 0 {
			t.Errorf("processes left under the hosts' remote_dirs %s: %v", root, left)
		}
		_ = os.RemoveAll(root)
	})
	return &Hosts{Addrs: addrs, User: user, KeyFile: keyFile, KnownHostsFile: knownHosts, Root: root}
}

// RemoteDir is the remote_dir of the host at address ip.
func (h *Hosts) RemoteDir(ip string) string { return filepath.Join(h.Root, ip) }

// Config returns a provider config for the hosts: the test's key and
// known_hosts, remote_dir Root/{host}, the given goray binary and
// state_dir.
func (h *Hosts) Config(goray, stateDir string) sshprovider.Config {
	return sshprovider.Config{
		Hosts: append([]string(nil), h.Addrs...), User: h.User, PrivateKeyFile: h.KeyFile, KnownHostsFile: h.KnownHostsFile,
		Port: 22, ConnectTimeout: 10 * time.Second, RemoteDir: filepath.Join(h.Root, "{host}"), GorayBinary: goray,
		StateDir: stateDir, StopTimeout: 10 * time.Second,
	}
}

// HCL returns the config as the body of a provider's config block.
func HCL(c sshprovider.Config) string {
	hosts, _ := json.Marshal(c.Hosts)
	return fmt.Sprintf("hosts = %s\nuser = %q\nprivate_key_file = %q\nknown_hosts_file = %q\nremote_dir = %q\ngoray_binary = %q\nstate_dir = %q\nconnect_timeout = %q\nstop_timeout = %q\n",
		hosts, c.User, c.PrivateKeyFile, c.KnownHostsFile, c.RemoteDir, c.GorayBinary, c.StateDir, c.ConnectTimeout, c.StopTimeout)
}

// Unreachable returns a loopback address:port nothing listens on.
func Unreachable(t testing.TB, ip string) string {
	t.Helper()
	return net.JoinHostPort(ip, strconv.Itoa(FreePort(t, ip)))
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
