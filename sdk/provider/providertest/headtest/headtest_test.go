package headtest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/plugin/plugintest"
	"github.com/goray-dev/goray/sdk/provider"
)

func TestMentions(t *testing.T) {
	const dir = "/tmp/gl123"
	tests := []struct {
		name  string
		parts []string
		want  bool
	}{
		{"argument is dir", []string{"goray", "--temp-dir", dir}, true},
		{"argument under dir", []string{"goray", "--temp-dir=" + dir + "/_1"}, true},
		{"variable under dir", []string{"goray", "GORAY_AUTH_TOKEN_PATH=" + dir + "/_1/token"}, true},
		{"another dir with that prefix", []string{"goray", dir + "4/x"}, false},
		{"working dir only", []string{"sh", "PWD=" + dir, "OLDPWD=" + dir + "/x"}, false},
		{"nothing", []string{"sleep", "1"}, false},
	}
	for _, tt := range tests {
		var parts [][]byte
		for _, p := range tt.parts {
			parts = append(parts, []byte(p))
		}
		if got := mentions(parts, dir); got != tt.want {
			t.Errorf("%s: mentions = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestZombie(t *testing.T) {
	tests := []struct {
		stat string
		want bool
	}{
		{"42 (goray) S 1 42", false},
		{"42 (a) Z) R 1 42", false},
		{"42 (a) Z) Z 1 42", true},
		{"42 (goray) Z 1 42", true},
		{"42 (goray) X 1 42", true},
		{"42 (goray", false},
	}
	for _, tt := range tests {
		if got := zombie([]byte(tt.stat)); got != tt.want {
			t.Errorf("zombie(%q) = %v, want %v", tt.stat, got, tt.want)
		}
	}
}

// TestProcessesKillAll: a process that names the dir is found, killed,
// and once killed (a zombie until it is reaped) no longer found.
func TestProcessesKillAll(t *testing.T) {
	dir := ShortTempDir(t, "ght")
	tests := []struct {
		name string
		cmd  func(t *testing.T) *exec.Cmd
	}{
		// The shell waits in a builtin (read, on a pipe nobody writes)
		// rather than in sleep: a shell that forks sleep has a child with
		// its own arguments, dir included, until the child execs.
		{"argument", func(t *testing.T) *exec.Cmd {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close(); w.Close() })
			c := exec.Command("/bin/sh", "-c", "read line", filepath.Join(dir, "x"))
			c.Stdin = r
			return c
		}},
		{"environment", func(*testing.T) *exec.Cmd {
			c := exec.Command("sleep", "60")
			c.Env = append(os.Environ(), "STATE="+dir)
			return c
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := tt.cmd(t)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
			defer cancel()
			found := func() error {
				if !slices.ContainsFunc(Processes(dir), func(p string) bool { return strings.HasPrefix(p, strconv.Itoa(cmd.Process.Pid)+": ") }) {
					return errors.New("not found")
				}
				return nil
			}
			if err := plugintest.Eventually(ctx, found); err != nil {
				t.Fatalf("Processes(%s) = %v: %v", dir, Processes(dir), err)
			}
			if killed := KillAll(dir); len(killed) != 1 {
				t.Errorf("KillAll killed %v, want the one process", killed)
			}
			// Killed but not reaped yet: a zombie, which is not live.
			if err := plugintest.Eventually(ctx, func() error {
				if found() == nil {
					return errors.New("still found")
				}
				return nil
			}); err != nil {
				t.Fatalf("Processes after KillAll: %v", Processes(dir))
			}
		})
	}
	if left := Processes(dir); len(left) > 0 {
		t.Errorf("Processes(%s) = %v, want none", dir, left)
	}
}

func TestFailingGoray(t *testing.T) {
	path := FailingGoray(t, t.TempDir())
	var stderr bytes.Buffer
	cmd := exec.Command(path, "start", "--block")
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("FailingGoray ran: %v, want exit status 3", err)
	}
	if !strings.Contains(stderr.String(), "the node cannot start") {
		t.Errorf("FailingGoray printed %q", stderr.String())
	}
}

func TestAliveNode(t *testing.T) {
	s := Status{Nodes: []Node{
		{NodeID: "head", State: "ALIVE", IsHead: true},
		{NodeID: "old", State: "DEAD", Labels: map[string]string{provider.LabelInstanceID: "i-1"}},
		{NodeID: "new", State: "ALIVE", Labels: map[string]string{provider.LabelInstanceID: "i-1"}},
		{NodeID: "other", State: "ALIVE", Labels: map[string]string{provider.LabelInstanceID: "i-2"}},
	}}
	tests := []struct {
		id, want string
		ok       bool
	}{
		{"i-1", "new", true},
		{"i-2", "other", true},
		{"i-3", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		n, ok := s.AliveNode(tt.id)
		if ok != tt.ok || n.NodeID != tt.want {
			t.Errorf("AliveNode(%q) = %q, %v; want %q, %v", tt.id, n.NodeID, ok, tt.want, tt.ok)
		}
	}
}
