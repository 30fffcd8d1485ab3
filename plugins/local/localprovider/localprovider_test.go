package localprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/plugins/local/internal/localtest"
	"github.com/goray-dev/goray/plugins/local/localprovider"
	"github.com/goray-dev/goray/sdk/plugin/plugintest"
	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/providertest"
	"github.com/goray-dev/goray/sdk/provider/providertest/headtest"
)

// gorayBin is the goray CLI, built once by TestMain.
var gorayBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "glb")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if gorayBin, err = headtest.BuildGoray(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// testIPs is the address range of the tests' nodes: away from the default
// range, which the acceptance tests use.
const testIPs = "127.0.3.1-127.0.3.254"

// open returns a provider on stateDir with the tests' settings, closed
// when the test ends.
func open(t *testing.T, stateDir string, mod ...func(*localprovider.Config)) *localprovider.Provider {
	t.Helper()
	cfg := localprovider.Config{StateDir: stateDir, GorayBinary: gorayBin, IPRange: testIPs, StopTimeout: 10 * time.Second}
	for _, f := range mod {
		f(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	p, err := localprovider.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// stateDir returns a fresh state_dir; when the test ends, every process
// still running under it is killed (and the test fails), and it is
// removed.
func stateDir(t *testing.T) string {
	t.Helper()
	return headtest.LeakCheckedDir(t, "gl")
}

// terminateAll terminates every instance of cluster in stateDir when the
// test ends, through a provider of its own, and waits until they are gone.
func terminateAll(t *testing.T, stateDir, cluster string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p, err := localprovider.Open(ctx, localprovider.Config{StateDir: stateDir, GorayBinary: gorayBin, IPRange: testIPs, StopTimeout: 10 * time.Second})
		if err != nil {
			t.Errorf("cleanup of cluster %q: %v", cluster, err)
			return
		}
		defer p.Close()
		err = plugintest.Eventually(ctx, func() error {
			l, err := p.List(ctx, &provider.ListRequest{ClusterName: cluster})
			if err != nil || len(l.Instances) == 0 {
				return err
			}
			ids := make([]string, len(l.Instances))
			for i, in := range l.Instances {
				ids[i] = in.ID
			}
			if _, err := p.Terminate(ctx, &provider.TerminateRequest{ClusterName: cluster, InstanceIDs: ids}); err != nil {
				return err
			}
			return fmt.Errorf("instances left: %v", ids)
		})
		if err != nil {
			t.Errorf("cleanup of cluster %q: %v", cluster, err)
		}
	})
}

// instanceDirs returns the instance temp dirs under stateDir.
func instanceDirs(t *testing.T, stateDir string) []string {
	t.Helper()
	ents, err := os.ReadDir(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "_") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestConfigure(t *testing.T) {
	dir := stateDir(t)
	tests := []struct {
		name string
		cfg  localprovider.Config
		err  string
	}{
		{"ok", localprovider.Config{StateDir: dir, GorayBinary: gorayBin, IPRange: testIPs, StopTimeout: time.Second}, ""},
		{"default range", localprovider.Config{StateDir: dir, GorayBinary: gorayBin, StopTimeout: time.Second}, ""},
		{"relative", localprovider.Config{StateDir: "state", StopTimeout: time.Second}, `state_dir "state" is not an absolute path`},
		{"too long", localprovider.Config{StateDir: "/tmp/" + strings.Repeat("x", 30), StopTimeout: time.Second}, "use a state_dir of at most 29 bytes"},
		{"bad range", localprovider.Config{StateDir: dir, IPRange: "127.0.0.9-127.0.0.1", StopTimeout: time.Second}, `ip_range "127.0.0.9-127.0.0.1": 127.0.0.1 comes before 127.0.0.9`},
		{"no stop timeout", localprovider.Config{StateDir: dir}, "stop_timeout 0s is not positive"},
		{"missing goray", localprovider.Config{StateDir: dir, GorayBinary: "/nonexistent/goray", StopTimeout: time.Second}, `goray_binary "/nonexistent/goray"`},
	}
	for _, tc := range tests {
		p, err := localprovider.Open(context.Background(), tc.cfg)
		if tc.err == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			} else {
				_ = p.Close()
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.err)
		}
	}
	// No state_dir: $TMPDIR/goray-local, within the length limit or not.
	short, err := os.MkdirTemp("/tmp", "l")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	dir = short
	t.Setenv("TMPDIR", dir)
	if p, err := localprovider.Open(context.Background(), localprovider.Config{GorayBinary: gorayBin, StopTimeout: time.Second}); err != nil {
		t.Errorf("no state_dir, TMPDIR %s: %v", dir, err)
	} else {
		_ = p.Close()
		if _, err := os.Stat(filepath.Join(dir, "goray-local")); err != nil {
			t.Errorf("no state_dir: the default %s/goray-local was not made: %v", dir, err)
		}
	}
	t.Setenv("TMPDIR", "/tmp/"+strings.Repeat("y", 30))
	if _, err := localprovider.Open(context.Background(), localprovider.Config{GorayBinary: gorayBin, StopTimeout: time.Second}); err == nil || !strings.Contains(err.Error(), "goray-local") {
		t.Errorf("no state_dir, long TMPDIR: %v; want an error naming the default state_dir", err)
	}
	// Through the plugin's typed config: defaults and the schema.
	p := localprovider.New()
	spec := p.ConfigSpec()
	if err := spec.Err(); err != nil {
		t.Fatal(err)
	}
	if d := spec.Schema().Attributes["ip_range"].Default; d != localprovider.DefaultIPRange {
		t.Errorf("ip_range default %v", d)
	}
	if err := p.Health(context.Background()); err == nil {
		t.Error("an unconfigured provider is healthy")
	}
	if err := spec.Configure(context.Background(), map[string]any{"state_dir": dir, "goray_binary": gorayBin}); err != nil {
		t.Fatalf("Configure with the defaults: %v", err)
	}
	if err := p.Health(context.Background()); err != nil {
		t.Errorf("a configured provider: %v", err)
	}
	_ = p.Close()
	// Unconfigured, it is unavailable.
	_, err = localprovider.New().List(context.Background(), &provider.ListRequest{ClusterName: "c"})
	if !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("List before Configure: %v; want ErrUnavailable", err)
	}
}

// TestConformance runs the conformance suite against real nodes joining a
// real head; a restart is a new Provider on the same state_dir.
func TestConformance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	head := headtest.StartHead(ctx, t, gorayBin)
	dir := stateDir(t)
	p := open(t, dir)
	failing := headtest.FailingGoray(t, headtest.ShortTempDir(t, "glf"))
	providertest.Run(t, func(*testing.T) provider.Provider { return p }, providertest.Options{
		Node: provider.NodeSpec{
			HeadAddress: head.Addr,
			AuthToken:   head.Token,
			Resources:   map[string]float64{provider.ResourceCPU: 1, provider.ResourceObjectStoreMemory: 32 << 20},
		},
		FailingLaunch: func(r *provider.LaunchRequest) { r.Node.GorayBinary = failing },
		Restart: func(t *testing.T, _ provider.Provider) provider.Provider {
			return open(t, dir)
		},
	})
	if left := instanceDirs(t, dir); len(left) > 0 {
		t.Errorf("instance dirs left in state_dir: %v", left)
	}
	if left := headtest.Processes(dir); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
}

// TestRealNode launches a real node into a real cluster, checks it joins
// with its instance label, survives a restart of the provider (which
// still lists it and does not launch its request again), and is gone,
// with its temp dir, once terminated.
func TestRealNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	head := headtest.StartHead(ctx, t, gorayBin)
	dir := stateDir(t)
	// The provider's own token file must not reach the node.
	t.Setenv("GORAY_AUTH_TOKEN_PATH", filepath.Join(dir, "no-such-token"))
	p := open(t, dir)
	const cluster = "real"
	terminateAll(t, dir, cluster)
	req := &provider.LaunchRequest{
		RequestID: "launch-1", ClusterName: cluster, NodeType: "cpu", Count: 1,
		Node: provider.NodeSpec{
			HeadAddress: head.Addr,
			AuthToken:   head.Token,
			Resources:   map[string]float64{provider.ResourceCPU: 2, provider.ResourceObjectStoreMemory: 32 << 20, provider.ResourceMemory: 1 << 30, "disk": 3},
			Labels:      map[string]string{provider.LabelClusterName: cluster, provider.LabelNodeType: "cpu"},
		},
	}
	if _, err := p.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	var in provider.Instance
	err := plugintest.Eventually(ctx, func() error {
		l, err := p.List(ctx, &provider.ListRequest{ClusterName: cluster})
		if err != nil {
			return err
		}
		if len(l.Instances) != 1 {
			return fmt.Errorf("List shows %d instances, want 1: %+v", len(l.Instances), l.Instances)
		}
		in = l.Instances[0]
		if in.State != provider.StateRunning {
			return fmt.Errorf("instance %s is %s", in.ID, in.State)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the instance never ran: %v", err)
	}
	if in.ID != "local-real-1" || in.RequestID != "launch-1" || in.NodeType != "cpu" || !strings.HasPrefix(in.Address, "127.0.3.") {
		t.Errorf("instance %+v", in)
	}
	var node headtest.Node
	err = plugintest.Eventually(ctx, func() error {
		s, err := head.Status(ctx)
		if err != nil {
			return err
		}
		if s.AliveNodes != 2 {
			return fmt.Errorf("%d alive nodes, want 2", s.AliveNodes)
		}
		for _, n := range s.Nodes {
			if !n.IsHead && n.State == "ALIVE" {
				node = n
				if got := n.Labels[provider.LabelInstanceID]; got != in.ID {
					return fmt.Errorf("the new node has label %s=%q, want %q (labels %v)", provider.LabelInstanceID, got, in.ID, n.Labels)
				}
				return nil
			}
		}
		return fmt.Errorf("no alive worker node in %+v", s.Nodes)
	})
	if err != nil {
		t.Fatalf("goray status: %v", err)
	}
	t.Logf("node %+v", node)
	if node.Labels[provider.LabelNodeType] != "cpu" || node.NodeName != in.ID {
		t.Errorf("the node: %+v", node)
	}
	// The token is in the node's environment, not on its command line.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", node.Pid))
	if err != nil {
		t.Fatalf("the node's process %d: %v", node.Pid, err)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", node.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cmdline), head.Token) {
		t.Error("the token is on the node's command line")
	}
	env := strings.Split(string(environ), "\x00")
	if !slices.Contains(env, "GORAY_AUTH_TOKEN="+head.Token) {
		t.Error("the node has no GORAY_AUTH_TOKEN")
	}
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GORAY_AUTH_TOKEN_PATH=") }) {
		t.Error("the node inherited GORAY_AUTH_TOKEN_PATH")
	}
	instanceDir := filepath.Dir(node.SessionDir)
	if !strings.HasPrefix(node.SessionDir, dir+"/_") {
		t.Errorf("the node's session %s is not under state_dir %s", node.SessionDir, dir)
	}

	// A restarted provider finds the instance and does not launch the
	// request again.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p2 := open(t, dir)
	l, err := p2.List(ctx, &provider.ListRequest{ClusterName: cluster})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Instances) != 1 || l.Instances[0].ID != in.ID || l.Instances[0].State != provider.StateRunning {
		t.Fatalf("after a restart List shows %+v; want %s running", l.Instances, in.ID)
	}
	if _, err := p2.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	if l, err := p2.List(ctx, &provider.ListRequest{ClusterName: cluster}); err != nil || len(l.Instances) != 1 {
		t.Fatalf("after the launch was repeated: %+v, %v; want the one instance", l, err)
	}
	if s, err := head.Status(ctx); err != nil || s.AliveNodes != 2 {
		t.Fatalf("after the launch was repeated: %+v, %v; want 2 alive nodes", s, err)
	}

	// Terminate: the node process is gone, and its temp dir.
	if _, err := p2.Terminate(ctx, &provider.TerminateRequest{RequestID: "t1", ClusterName: cluster, InstanceIDs: []string{in.ID}}); err != nil {
		t.Fatal(err)
	}
	err = plugintest.Eventually(ctx, func() error {
		l, err := p2.List(ctx, &provider.ListRequest{ClusterName: cluster})
		if err != nil {
			return err
		}
		if len(l.Instances) > 0 {
			return fmt.Errorf("still listed: %+v", l.Instances)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", node.Pid)); err == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", node.Pid)); !strings.Contains(string(st), ") Z") {
			t.Errorf("the node process %d is still running", node.Pid)
		}
	}
	if _, err := os.Stat(instanceDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the instance's temp dir %s: %v; want it removed", instanceDir, err)
	}
	if left := headtest.Processes(dir); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	err = plugintest.Eventually(ctx, func() error {
		s, err := head.Status(ctx)
		if err != nil {
			return err
		}
		if s.AliveNodes != 1 {
			return fmt.Errorf("%d alive nodes, want 1", s.AliveNodes)
		}
		return nil
	})
	if err != nil {
		t.Errorf("after terminate: %v", err)
	}
	pe, err := p2.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: cluster})
	if err != nil || len(pe.Errors) != 0 {
		t.Errorf("PollErrors: %+v, %v; want none", pe, err)
	}
}

// TestConformanceOverGRPC runs the suite through the SDK's gRPC bridge.
func TestConformanceOverGRPC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	head := headtest.StartHead(ctx, t, gorayBin)
	dir := stateDir(t)
	c := providertest.OverGRPC(t, open(t, dir))
	failing := headtest.FailingGoray(t, headtest.ShortTempDir(t, "glf"))
	providertest.Run(t, func(*testing.T) provider.Provider { return c }, providertest.Options{
		Node: provider.NodeSpec{
			HeadAddress: head.Addr,
			AuthToken:   head.Token,
			Resources:   map[string]float64{provider.ResourceCPU: 1, provider.ResourceObjectStoreMemory: 32 << 20},
		},
		FailingLaunch: func(r *provider.LaunchRequest) { r.Node.GorayBinary = failing },
		Restart: func(t *testing.T, _ provider.Provider) provider.Provider {
			return providertest.OverGRPC(t, open(t, dir))
		},
	})
	if left := instanceDirs(t, dir); len(left) > 0 {
		t.Errorf("instance dirs left in state_dir: %v", left)
	}
}

// fakeSpec is a NodeSpec whose node is the stand-in goray at bin.
func fakeSpec(bin string) provider.NodeSpec {
	return provider.NodeSpec{HeadAddress: "127.0.0.1:1", AuthToken: "fake-cluster-token-0123456789", GorayBinary: bin,
		Resources: map[string]float64{provider.ResourceCPU: 1}}
}

// waitInstances polls List until it has n instances, all in state want.
func waitInstances(ctx context.Context, t *testing.T, p provider.Provider, cluster string, n int, want provider.InstanceState) []provider.Instance {
	t.Helper()
	var ins []provider.Instance
	err := plugintest.Eventually(ctx, func() error {
		l, err := p.List(ctx, &provider.ListRequest{ClusterName: cluster})
		if err != nil {
			return err
		}
		ins = l.Instances
		if len(ins) != n {
			return fmt.Errorf("%d instances, want %d: %+v", len(ins), n, ins)
		}
		for _, in := range ins {
			if in.State != want {
				return fmt.Errorf("instance %s is %s, want %s", in.ID, in.State, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("cluster %q: %v", cluster, err)
	}
	return ins
}

// TestEarlyExit: a node that exits before it serves is dropped, its temp
// dir removed, and reported once with its exit status and the end of its
// output; a binary that cannot run at all likewise.
func TestEarlyExit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := stateDir(t)
	p := open(t, dir)
	tests := []struct {
		name, bin string
		want      []string
	}{
		{"exits", headtest.FailingGoray(t, headtest.ShortTempDir(t, "glf")),
			[]string{"exit status 3", "before it served", "goray-test: the node cannot start", "local-early-1"}},
		{"missing", "/nonexistent/goray", []string{"starting the node of instance local-early-2", "no such file or directory"}},
	}
	for i, tc := range tests {
		req := &provider.LaunchRequest{RequestID: fmt.Sprintf("r%d", i), ClusterName: "early", NodeType: "cpu", Count: 1, Node: fakeSpec(tc.bin)}
		if _, err := p.Launch(ctx, req); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []provider.LaunchError
		err := plugintest.Eventually(ctx, func() error {
			r, err := p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: "early"})
			if err != nil {
				return err
			}
			got = append(got, r.Errors...)
			if len(got) == 0 {
				return errors.New("no error reported")
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(got) != 1 || got[0].RequestID != req.RequestID || got[0].Op != provider.ErrorOpLaunch || got[0].NodeType != "cpu" || got[0].Count != 1 {
			t.Fatalf("%s: errors %+v", tc.name, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got[0].Message, w) {
				t.Errorf("%s: the error does not say %q: %s", tc.name, w, got[0].Message)
			}
		}
		if strings.Contains(got[0].Message, req.Node.AuthToken) {
			t.Errorf("%s: the error shows the token: %s", tc.name, got[0].Message)
		}
		if r, err := p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: "early"}); err != nil || len(r.Errors) != 0 {
			t.Errorf("%s: PollErrors again: %+v, %v; want nothing", tc.name, r, err)
		}
		if l, err := p.List(ctx, &provider.ListRequest{ClusterName: "early"}); err != nil || len(l.Instances) != 0 {
			t.Errorf("%s: List: %+v, %v; want nothing", tc.name, l, err)
		}
		if left := instanceDirs(t, dir); len(left) > 0 {
			t.Errorf("%s: instance dirs left: %v", tc.name, left)
		}
	}
}

// TestSetupCommands: the setup commands run in the instance's dir before
// the node starts; one that fails keeps the node from starting and is
// reported.
func TestSetupCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := stateDir(t)
	p := open(t, dir)
	terminateAll(t, dir, "setup")
	bin := localtest.SleepingGoray(t, headtest.ShortTempDir(t, "gls"), false)
	spec := fakeSpec(bin)
	spec.SetupCommands = []string{"echo one > setup.txt", `echo "two $GORAY_AUTH_TOKEN" >> setup.txt`}
	if _, err := p.Launch(ctx, &provider.LaunchRequest{RequestID: "ok", ClusterName: "setup", NodeType: "cpu", Count: 1, Node: spec}); err != nil {
		t.Fatal(err)
	}
	waitInstances(ctx, t, p, "setup", 1, provider.StateRunning)
	b, err := os.ReadFile(filepath.Join(dir, "_1", "setup.txt"))
	if want := "one\ntwo " + spec.AuthToken + "\n"; err != nil || string(b) != want {
		t.Errorf("setup.txt: %q, %v; want %q", b, err, want)
	}
	spec.SetupCommands = []string{"echo preparing", "echo the setup of " + spec.AuthToken + " failed >&2; false", "echo never"}
	if _, err := p.Launch(ctx, &provider.LaunchRequest{RequestID: "bad", ClusterName: "setup", NodeType: "cpu", Count: 1, Node: spec}); err != nil {
		t.Fatal(err)
	}
	var got []provider.LaunchError
	err = plugintest.Eventually(ctx, func() error {
		r, err := p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: "setup"})
		if err != nil {
			return err
		}
		got = append(got, r.Errors...)
		if len(got) == 0 {
			return errors.New("no error reported")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	msg := got[0].Message
	if !strings.Contains(msg, "preparing\nthe setup of <redacted> failed") || strings.Contains(msg, "never") || strings.Contains(msg, spec.AuthToken) {
		t.Errorf("the failed setup's error: %s", msg)
	}
}

// TestTerminateEscalates: a node that ignores SIGTERM gets SIGKILL after
// stop_timeout; a terminated instance goes through terminating.
func TestTerminateEscalates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := stateDir(t)
	p := open(t, dir, func(c *localprovider.Config) { c.StopTimeout = 300 * time.Millisecond })
	terminateAll(t, dir, "stubborn")
	bin := localtest.SleepingGoray(t, headtest.ShortTempDir(t, "gls"), true)
	if _, err := p.Launch(ctx, &provider.LaunchRequest{RequestID: "r", ClusterName: "stubborn", NodeType: "cpu", Count: 2, Node: fakeSpec(bin)}); err != nil {
		t.Fatal(err)
	}
	ins := waitInstances(ctx, t, p, "stubborn", 2, provider.StateRunning)
	if ins[0].Address == ins[1].Address {
		t.Errorf("two instances share address %s", ins[0].Address)
	}
	if len(headtest.Processes(dir)) == 0 {
		t.Fatal("no node processes")
	}
	start := time.Now()
	if _, err := p.Terminate(ctx, &provider.TerminateRequest{ClusterName: "stubborn", InstanceIDs: []string{ins[0].ID, ins[1].ID}}); err != nil {
		t.Fatal(err)
	}
	l, err := p.List(ctx, &provider.ListRequest{ClusterName: "stubborn"})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range l.Instances {
		if in.State != provider.StateTerminating {
			t.Errorf("right after Terminate instance %s is %s; want terminating", in.ID, in.State)
		}
	}
	waitInstances(ctx, t, p, "stubborn", 0, "")
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("the nodes, which ignore SIGTERM, were gone after %v, before stop_timeout", d)
	}
	if left := headtest.Processes(dir); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	if left := instanceDirs(t, dir); len(left) > 0 {
		t.Errorf("instance dirs left: %v", left)
	}
	if r, err := p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: "stubborn"}); err != nil || len(r.Errors) != 0 {
		t.Errorf("PollErrors: %+v, %v; want nothing", r, err)
	}
}

// editState rewrites cluster's state file in stateDir with edit.
func editState(t *testing.T, stateDir, cluster string, edit func(map[string]any)) {
	t.Helper()
	path := filepath.Join(stateDir, cluster, "instances.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCrashMidLaunch: a provider that died after recording a launch but
// before recording its node's pid — before or after starting the node —
// is followed by one that finds the node, or starts it, exactly once.
func TestCrashMidLaunch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := stateDir(t)
	terminateAll(t, dir, "crash")
	bin := localtest.SleepingGoray(t, headtest.ShortTempDir(t, "gls"), false)
	spec := fakeSpec(bin)
	p := open(t, dir)
	if _, err := p.Launch(ctx, &provider.LaunchRequest{RequestID: "r", ClusterName: "crash", NodeType: "cpu", Count: 2, Node: spec}); err != nil {
		t.Fatal(err)
	}
	ins := waitInstances(ctx, t, p, "crash", 2, provider.StateRunning)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// Instance 1: its node runs, but the pid was never recorded.
	// Instance 2: recorded, never started.
	node2 := filepath.Join(dir, "_2")
	// One process each; the node's shell may show twice for a moment
	// (forked for a sleep, before the exec).
	oneProcess := func(d string) error {
		if procs := headtest.Processes(d); len(procs) != 1 {
			return fmt.Errorf("instance dir %s has %d processes, want 1: %v", filepath.Base(d), len(procs), procs)
		}
		return nil
	}
	if err := plugintest.Eventually(ctx, func() error { return oneProcess(node2) }); err != nil {
		t.Fatal(err)
	}
	headtest.KillAll(node2)
	if err := plugintest.Eventually(ctx, func() error {
		if left := headtest.Processes(node2); len(left) > 0 {
			return fmt.Errorf("still running: %v", left)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(node2, "ready.json"))
	editState(t, dir, "crash", func(m map[string]any) {
		for _, in := range m["instances"].([]any) {
			in.(map[string]any)["pid"] = 0
			in.(map[string]any)["state"] = "pending"
		}
	})
	p2 := open(t, dir)
	again := waitInstances(ctx, t, p2, "crash", 2, provider.StateRunning)
	if !slices.Equal([]string{again[0].ID, again[1].ID}, []string{ins[0].ID, ins[1].ID}) && !slices.Equal([]string{again[1].ID, again[0].ID}, []string{ins[0].ID, ins[1].ID}) {
		t.Errorf("after the crash: %+v; want %+v", again, ins)
	}
	for _, d := range []string{"_1", "_2"} {
		if err := plugintest.Eventually(ctx, func() error { return oneProcess(filepath.Join(dir, d)) }); err != nil {
			t.Error(err)
		}
	}
	// The restarted node got the token from the instance's token file.
	var pid int
	if _, err := fmt.Sscanf(headtest.Processes(node2)[0], "%d:", &pid); err != nil {
		t.Fatal(err)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(environ), "\x00"), "GORAY_AUTH_TOKEN="+spec.AuthToken) {
		t.Error("the node started after the crash has no token")
	}
	// The state file never holds the token.
	b, err := os.ReadFile(filepath.Join(dir, "crash", "instances.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), spec.AuthToken) {
		t.Error("the state file holds the token")
	}
}

// TestAddressesAndQuota: instances of every cluster get distinct
// addresses, never the head's; when the range runs out a launch fails
// whole with ErrQuotaExceeded and starts nothing.
func TestAddressesAndQuota(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := stateDir(t)
	p := open(t, dir, func(c *localprovider.Config) { c.IPRange = "127.0.3.10-127.0.3.12" })
	terminateAll(t, dir, "a")
	terminateAll(t, dir, "b")
	bin := localtest.SleepingGoray(t, headtest.ShortTempDir(t, "gls"), false)
	spec := fakeSpec(bin)
	spec.HeadAddress = "127.0.3.11:6379" // in the range: skipped
	if _, err := p.Launch(ctx, &provider.LaunchRequest{RequestID: "a1", ClusterName: "a", NodeType: "cpu", Count: 1, Node: spec}); err != nil {
		t.Fatal(err)
	}
	_, err := p.Launch(ctx, &provider.LaunchRequest{RequestID: "b1", ClusterName: "b", NodeType: "cpu", Count: 2, Node: spec})
	if !errors.Is(err, provider.ErrQuotaExceeded) || !strings.Contains(err.Error(), "1 more needed") {
		t.Errorf("a launch beyond the range: %v; want ErrQuotaExceeded", err)
	}
	if _, err := p.Launch(ctx, &provider.LaunchRequest{RequestID: "b2", ClusterName: "b", NodeType: "cpu", Count: 1, Node: spec}); err != nil {
		t.Fatal(err)
	}
	a := waitInstances(ctx, t, p, "a", 1, provider.StateRunning)
	b := waitInstances(ctx, t, p, "b", 1, provider.StateRunning)
	if a[0].Address != "127.0.3.10" || b[0].Address != "127.0.3.12" {
		t.Errorf("addresses %s and %s; want 127.0.3.10 and 127.0.3.12 (the head has .11)", a[0].Address, b[0].Address)
	}
	if a[0].ID != "local-a-1" || b[0].ID != "local-b-1" || b[0].RequestID != "b2" {
		t.Errorf("instances %+v and %+v", a[0], b[0])
	}
	// The refused request was not recorded: it can be sent again later.
	if left := instanceDirs(t, dir); len(left) != 2 {
		t.Errorf("instance dirs %v; want 2", left)
	}
}

// TestBadClusterName: a cluster name that cannot name a directory is
// refused.
func TestBadClusterName(t *testing.T) {
	p := open(t, stateDir(t))
	for _, name := range []string{"../x", ".hidden", "_x", "a/b", strings.Repeat("a", 65), "sp ace"} {
		_, err := p.List(context.Background(), &provider.ListRequest{ClusterName: name})
		if !errors.Is(err, provider.ErrInvalidRequest) || !strings.Contains(err.Error(), "cluster name") {
			t.Errorf("List of cluster %q: %v; want ErrInvalidRequest", name, err)
		}
		_, err = p.Launch(context.Background(), &provider.LaunchRequest{RequestID: "r", ClusterName: name, NodeType: "t", Count: 1, Node: fakeSpec("/bin/true")})
		if !errors.Is(err, provider.ErrInvalidRequest) {
			t.Errorf("Launch in cluster %q: %v; want ErrInvalidRequest", name, err)
		}
	}
}
