package sshprovider_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/spawn"
	"github.com/goray-dev/goray/internal/testservers/sshdtest"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/plugins/ssh/internal/sshtest"
	"github.com/goray-dev/goray/plugins/ssh/sshprovider"
	"github.com/goray-dev/goray/sdk/plugin/plugintest"
	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/providertest"
	"github.com/goray-dev/goray/sdk/provider/providertest/headtest"
)

// gorayBin is the goray CLI, built once by TestMain.
var gorayBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gsb")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if gorayBin, err = headtest.BuildGoray(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// internal/spawn (the test sshd's starter) keeps a thread, and its
	// goroutine, for the life of the process: start it now, so that the
	// goroutine leak checks do not count it.
	cmd := exec.Command("true")
	if err := spawn.Start(cmd); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = cmd.Wait()
	return m.Run()
}

// testIPs are the loopback addresses of the tests' hosts: away from the
// local provider's and the acceptance tests'.
var testIPs = []string{"127.0.2.1", "127.0.2.2", "127.0.2.3", "127.0.2.4", "127.0.2.5", "127.0.2.6"}

// stateDir returns a fresh state_dir, removed when the test ends.
func stateDir(t *testing.T) string {
	t.Helper()
	return headtest.ShortTempDir(t, "gss")
}

// open returns a provider with cfg, closed when the test ends.
func open(t *testing.T, cfg sshprovider.Config) *sshprovider.Provider {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	p, err := sshprovider.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// conformanceNode is the node spec of the conformance runs.
func conformanceNode(head *headtest.Head) provider.NodeSpec {
	return provider.NodeSpec{
		HeadAddress: head.Addr,
		AuthToken:   head.Token,
		Resources:   map[string]float64{provider.ResourceCPU: 1, provider.ResourceObjectStoreMemory: 32 << 20},
	}
}

// TestConformance runs the conformance suite against real nodes started
// over real SSH on six hosts, joining a real head; a restart is a new
// Provider on the same state_dir.
func TestConformance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hosts, _ := startHosts(t, testIPs...)
	head := headtest.StartHead(ctx, t, gorayBin)
	cfg := hosts.Config(gorayBin, stateDir(t))
	p := open(t, cfg)
	failing := headtest.FailingGoray(t, headtest.ShortTempDir(t, "gsf"))
	providertest.Run(t, func(*testing.T) provider.Provider { return p }, providertest.Options{
		Node:          conformanceNode(head),
		FailingLaunch: func(r *provider.LaunchRequest) { r.Node.GorayBinary = failing },
		Restart: func(t *testing.T, _ provider.Provider) provider.Provider {
			return open(t, cfg)
		},
	})
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

// waitErrors polls PollErrors until it has reported n errors.
func waitErrors(ctx context.Context, t *testing.T, p provider.Provider, cluster string, n int) []provider.LaunchError {
	t.Helper()
	var got []provider.LaunchError
	err := plugintest.Eventually(ctx, func() error {
		r, err := p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: cluster})
		if err != nil {
			return err
		}
		got = append(got, r.Errors...)
		if len(got) < n {
			return fmt.Errorf("%d errors, want %d: %+v", len(got), n, got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("cluster %q: %v", cluster, err)
	}
	return got
}

// terminateAll terminates every instance of cluster and waits until List
// shows none.
func terminateAll(ctx context.Context, t *testing.T, p provider.Provider, cluster string) {
	t.Helper()
	err := plugintest.Eventually(ctx, func() error {
		l, err := p.List(ctx, &provider.ListRequest{ClusterName: cluster})
		if err != nil || len(l.Instances) == 0 {
			return err
		}
		var ids []string
		for _, in := range l.Instances {
			ids = append(ids, in.ID)
		}
		if _, err := p.Terminate(ctx, &provider.TerminateRequest{ClusterName: cluster, InstanceIDs: ids}); err != nil {
			return err
		}
		return fmt.Errorf("instances left: %v", ids)
	})
	if err != nil {
		t.Fatalf("terminating cluster %q: %v", cluster, err)
	}
}

// launchReq is a launch request of count instances of node type "cpu".
func launchReq(id, cluster string, count int, node provider.NodeSpec, nodeConfig string) *provider.LaunchRequest {
	node.Labels = map[string]string{provider.LabelClusterName: cluster, provider.LabelNodeType: "cpu"}
	return &provider.LaunchRequest{RequestID: id, ClusterName: cluster, NodeType: "cpu", Count: count, NodeConfig: []byte(nodeConfig), Node: node}
}

// startHosts starts an sshd on the loopback addresses ips (each a host)
// and returns the hosts, each with a remote_dir of its own, and the
// server.
func startHosts(t *testing.T, ips ...string) (*sshtest.Hosts, *sshdtest.Server) {
	t.Helper()
	srv := sshdtest.Start(t, ips...)
	return sshtest.NewHosts(t, srv.Addrs, srv.User, srv.KeyFile, srv.KnownHostsFile), srv
}
