package sshprovider_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/sdk/plugin/plugintest"
	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/providertest/headtest"
)

// fileID is a file's device and inode: a file replaced has another.
func fileID(t *testing.T, path string) [2]uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	s := st.Sys().(*syscall.Stat_t)
	return [2]uint64{uint64(s.Dev), s.Ino}
}

// TestLaunchJoinsAndTerminates: a launch onto a host copies the goray
// binary there (content-addressed), runs the setup commands on that host,
// and starts a node that joins the head with its instance label, the
// host's address and the token from a file only its owner reads (never on
// a command line); terminating it stops the node (no process left) and
// removes its files; a second launch on the same host reuses the binary,
// another host gets its own copy. With every host taken a launch is a
// quota error; with fewer free than asked for, what fits is launched and
// the rest reported. No goroutine is left once the provider is closed.
func TestLaunchJoinsAndTerminates(t *testing.T) {
	leaktest.Goroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hosts, _ := startHosts(t, "127.0.2.1", "127.0.2.2")
	head := headtest.StartHead(ctx, t, gorayBin)
	p := open(t, hosts.Config(gorayBin, stateDir(t)))
	log := filepath.Join(hosts.Root, "setup.log")
	node := conformanceNode(head)
	node.SetupCommands = []string{`echo "setup on $SSH_CONNECTION" >> ` + log}
	a, b := hosts.Addrs[0], hosts.Addrs[1]

	if _, err := p.Launch(ctx, launchReq("r1", "join", 1, node, `{"hosts": ["`+a+`"]}`)); err != nil {
		t.Fatal(err)
	}
	in := waitInstances(ctx, t, p, "join", 1, provider.StateRunning)[0]
	if in.Address != "127.0.2.1" || in.RequestID != "r1" || in.NodeType != "cpu" {
		t.Fatalf("instance %+v; want address 127.0.2.1, request r1, node type cpu", in)
	}
	dirA := hosts.RemoteDir("127.0.2.1")
	bins, _ := filepath.Glob(filepath.Join(dirA, "bin", "*", "goray"))
	if len(bins) != 1 {
		t.Fatalf("goray binaries on host %s: %v; want one", a, bins)
	}
	binID := fileID(t, bins[0])
	setup, _ := os.ReadFile(log)
	if !strings.Contains(string(setup), "setup on ") || !strings.Contains(string(setup), " 127.0.2.1 ") {
		t.Fatalf("setup commands did not run on host 127.0.2.1: %q", setup)
	}
	st, err := os.Stat(filepath.Join(dirA, "token"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the token file on the host: %v, %v; want mode 0600", st, err)
	}
	var nodePid int
	err = plugintest.Eventually(ctx, func() error {
		s, err := head.Status(ctx)
		if err != nil {
			return err
		}
		n, ok := s.AliveNode(in.ID)
		if !ok {
			return errors.New("no alive node with the instance's label")
		}
		nodePid = n.Pid
		return nil
	})
	if err != nil {
		t.Fatalf("the node of instance %s never joined the head: %v", in.ID, err)
	}
	for _, proc := range headtest.Processes(dirA) {
		if strings.Contains(proc, head.Token) {
			t.Errorf("a process on the host has the token on its command line: %s", proc)
		}
	}
	if args, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(nodePid), "cmdline")); !strings.Contains(string(args), "--node-ip\x00127.0.2.1\x00") {
		t.Errorf("the node's command line %q has no --node-ip 127.0.2.1", args)
	}

	terminateAll(ctx, t, p, "join")
	if left := headtest.Processes(dirA); len(left) > 0 {
		t.Fatalf("processes left on host %s after terminate: %v", a, left)
	}
	for _, f := range []string{"n", "token", "instance.json", "node.pid"} {
		if _, err := os.Stat(filepath.Join(dirA, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left in the host's remote_dir after terminate: %v", f, err)
		}
	}

	// Again on the same host: the binary is there already. And on the
	// other host: a copy of its own.
	if _, err := p.Launch(ctx, launchReq("r2", "join", 2, node, "")); err != nil {
		t.Fatal(err)
	}
	ins := waitInstances(ctx, t, p, "join", 2, provider.StateRunning)
	var addrs []string
	for _, in := range ins {
		addrs = append(addrs, in.Address)
	}
	slices.Sort(addrs)
	if !slices.Equal(addrs, []string{"127.0.2.1", "127.0.2.2"}) {
		t.Fatalf("two instances on %v; want one on each host", addrs)
	}
	if got := fileID(t, bins[0]); got != binID {
		t.Errorf("the goray binary on host %s was copied again", a)
	}
	if bb, _ := filepath.Glob(filepath.Join(hosts.RemoteDir("127.0.2.2"), "bin", "*", "goray")); len(bb) != 1 || filepath.Base(filepath.Dir(bb[0])) != filepath.Base(filepath.Dir(bins[0])) {
		t.Errorf("goray binaries on host %s: %v; want the same content address as on %s", b, bb, a)
	}
	// Every host is taken: one more is a quota error, launching nothing.
	_, err = p.Launch(ctx, launchReq("r3", "join", 1, node, ""))
	if !errors.Is(err, provider.ErrQuotaExceeded) {
		t.Errorf("a launch with every host taken: %v; want ErrQuotaExceeded", err)
	}
	// One host free, two asked for: one launched, the other reported.
	var onA string
	for _, in := range ins {
		if in.Address == "127.0.2.1" {
			onA = in.ID
		}
	}
	if _, err := p.Terminate(ctx, &provider.TerminateRequest{ClusterName: "join", InstanceIDs: []string{onA}}); err != nil {
		t.Fatal(err)
	}
	waitInstances(ctx, t, p, "join", 1, provider.StateRunning)
	if _, err := p.Launch(ctx, launchReq("r4", "join", 2, node, "")); err != nil {
		t.Fatalf("a launch of 2 with one host free: %v", err)
	}
	le := waitErrors(ctx, t, p, "join", 1)
	if len(le) != 1 || le[0].RequestID != "r4" || le[0].Count != 1 || !strings.Contains(le[0].Message, "only 1 of the 2 hosts") {
		t.Errorf("a launch of 2 with one host free reports %+v; want one error for the instance that does not fit", le)
	}
	ins = waitInstances(ctx, t, p, "join", 2, provider.StateRunning)
	if n := len(ofRequest(ins, "r4")); n != 1 {
		t.Errorf("a launch of 2 with one host free launched %d", n)
	}
	terminateAll(ctx, t, p, "join")
	if left := headtest.Processes(hosts.Root); len(left) > 0 {
		t.Fatalf("processes left on the hosts: %v", left)
	}
}

// TestNodeDies: a node that dies by itself leaves List (after its host
// was cleaned: no token, record or temp dir left), and its host is free
// for the next launch.
func TestNodeDies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hosts, _ := startHosts(t, "127.0.2.1")
	head := headtest.StartHead(ctx, t, gorayBin)
	p := open(t, hosts.Config(gorayBin, stateDir(t)))
	if _, err := p.Launch(ctx, launchReq("r1", "dies", 1, conformanceNode(head), "")); err != nil {
		t.Fatal(err)
	}
	in := waitInstances(ctx, t, p, "dies", 1, provider.StateRunning)[0]
	dir := hosts.RemoteDir("127.0.2.1")
	b, err := os.ReadFile(filepath.Join(dir, "node.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitInstances(ctx, t, p, "dies", 0, provider.StateRunning)
	for _, f := range []string{"n", "token", "instance.json", "node.pid"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left on the host of a node that died: %v", f, err)
		}
	}
	if left := headtest.Processes(dir); len(left) > 0 {
		t.Errorf("processes left on the host of a node that died: %v", left)
	}
	if _, err := p.Launch(ctx, launchReq("r2", "dies", 1, conformanceNode(head), "")); err != nil {
		t.Fatalf("the host of a node that died is not free: %v", err)
	}
	again := waitInstances(ctx, t, p, "dies", 1, provider.StateRunning)[0]
	if again.ID == in.ID {
		t.Errorf("the new instance has the dead one's id %s", in.ID)
	}
	terminateAll(ctx, t, p, "dies")
}

// ofRequest returns the instances of request id.
func ofRequest(ins []provider.Instance, id string) []provider.Instance {
	var out []provider.Instance
	for _, in := range ins {
		if in.RequestID == id {
			out = append(out, in)
		}
	}
	return out
}
