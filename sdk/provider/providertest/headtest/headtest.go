// Package headtest is what the tests of a provider whose instances are
// real goray nodes share: a real head started with a goray binary (Head:
// its environment, goray commands run against it, `goray status --json`),
// stand-in goray binaries that fail or misbehave (WriteScript,
// FailingGoray), and the leak checks a test ends with (LeakCheckedDir,
// Processes and KillAll: every live process that mentions a directory). It runs on
// Linux (it reads /proc).
//
//	func TestJoins(t *testing.T) {
//		head := headtest.StartHead(ctx, t, gorayBin)
//		... launch an instance with NodeSpec{HeadAddress: head.Addr, AuthToken: head.Token} ...
//		err := plugintest.Eventually(ctx, func() error {
//			s, err := head.Status(ctx)
//			if err != nil {
//				return err
//			}
//			if _, ok := s.AliveNode(instanceID); !ok {
//				return fmt.Errorf("instance %s has not joined", instanceID)
//			}
//			return nil
//		})
//	}
package headtest

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/goray-dev/goray/sdk/provider"
)

// GorayPackage is the goray CLI's package, which BuildGoray builds.
const GorayPackage = "github.com/goray-dev/goray/cmd/goray"

// BuildGoray builds the goray CLI (GorayPackage) into dir/goray and
// returns its path. It runs `go build` in the current directory, so it
// builds goray as the module of the test resolves it: inside the goray
// module (goray's own plugins), its working tree; in a module that
// requires goray, that version, whose dependencies go.sum must list.
// Elsewhere give StartHead an installed goray instead.
func BuildGoray(dir string) (string, error) {
	out := filepath.Join(dir, "goray")
	cmd := exec.Command("go", "build", "-o", out, GorayPackage)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", GorayPackage, err, b)
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

// LeakCheckedDir is ShortTempDir that also checks, when the test ends,
// that nothing was left running: every process still mentioning the dir
// (Processes) fails the test and is killed before the dir is removed.
// Give it to what a provider starts processes under (its state_dir, a
// host's directory).
func LeakCheckedDir(t testing.TB, prefix string) string {
	t.Helper()
	d := ShortTempDir(t, prefix)
	t.Cleanup(func() {
		if left := KillAll(d); len(left) > 0 {
			t.Errorf("processes left under %s: %v", d, left)
		}
	})
	return d
}

// FreePort returns a TCP port free on the address ip now.
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

// StartHead starts a head with the goray binary at goray (BuildGoray, or
// an installed one) under a fresh temp dir, with its token file in
// another, and stops it (and removes both) when the test ends.
func StartHead(ctx context.Context, t testing.TB, goray string) *Head {
	t.Helper()
	h := &Head{Goray: goray, Dir: ShortTempDir(t, "ghd")}
	auth := ShortTempDir(t, "gha")
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

// Env is this process's environment without GORAY_* variables, plus the
// head's token file: what every goray command of the test runs with.
func (h *Head) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GORAY_") {
			env = append(env, kv)
		}
	}
	// The dashboard on a free port: test packages run at once, and a
	// taken default port (8265) is an error.
	return append(env, "GORAY_AUTH_TOKEN_PATH="+h.TokenPath, "GORAY_DASHBOARD_PORT=-1")
}

// Run runs the goray CLI with args (and Env) and returns its stdout, or
// an error with its output.
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

// Node is a node of `goray status --json`.
type Node struct {
	// NodeID, NodeName, State ("ALIVE", "DEAD"), IsHead, Pid, SessionDir
	// and Labels are as `goray status --json` shows them.
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

// AliveNode returns the alive node of the instance id (its
// provider.LabelInstanceID label).
func (s Status) AliveNode(id string) (Node, bool) {
	for _, n := range s.Nodes {
		if id != "" && n.State == "ALIVE" && n.Labels[provider.LabelInstanceID] == id {
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

// FailingGoray writes a stand-in goray into dir that prints a line
// ("goray-test: the node cannot start") and exits with status 3, as a
// node that cannot start, and returns its path.
func FailingGoray(t testing.TB, dir string) string {
	t.Helper()
	return WriteScript(t, dir, "failing-goray", "echo 'goray-test: the node cannot start' >&2\nexit 3\n")
}

// Processes returns the live processes (other than this one; zombies are
// not live) whose command line or environment mentions dir or a path
// under it, as "pid: command line". The working directory variables
// (PWD, OLDPWD) do not count.
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
		if mentions(append(bytes.Split(cmdline, []byte{0}), bytes.Split(environ, []byte{0})...), dir) {
			out = append(out, fmt.Sprintf("%d: %s", pid, strings.ReplaceAll(string(bytes.TrimRight(cmdline, "\x00")), "\x00", " ")))
		}
	}
	return out
}

// mentions reports whether one of parts (arguments, NAME=value) names dir
// or a path under it.
func mentions(parts [][]byte, dir string) bool {
	for _, part := range parts {
		if bytes.HasPrefix(part, []byte("PWD=")) || bytes.HasPrefix(part, []byte("OLDPWD=")) {
			continue
		}
		if s := string(part); strings.Contains(s, dir+"/") || strings.HasSuffix(s, dir) {
			return true
		}
	}
	return false
}

// zombie reports whether /proc/<pid>/stat is a zombie's (or a dead
// process').
func zombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

// KillAll kills (SIGKILL) every process Processes(dir) finds — the last
// resort of a test's cleanup — and returns what it killed.
func KillAll(dir string) []string {
	left := Processes(dir)
	for _, p := range left {
		pid, _ := strconv.Atoi(strings.SplitN(p, ":", 2)[0])
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return left
}
