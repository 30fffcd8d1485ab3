package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/sdk/plugin/plugintest"
	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/providertest"
	"github.com/goray-dev/goray/sdk/provider/providertest/headtest"
)

// Binaries built once by TestMain.
var pluginBin, gorayBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "glp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if pluginBin, err = host.BuildPlugin(dir, ".", "goray-provider-local"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if gorayBin, err = headtest.BuildGoray(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// stateDir returns a fresh state_dir; when the test ends, every process
// still running under it is killed (and the test fails), and it is
// removed.
func stateDir(t *testing.T) string {
	t.Helper()
	return headtest.LeakCheckedDir(t, "gl")
}

// launch starts the plugin binary through a real plugin host on stateDir
// and returns a provider client of it and the plugin's pid.
func launch(t *testing.T, stateDir string) (provider.Provider, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, v := host.Launch(ctx, t, pluginBin, "provider", "local",
		fmt.Sprintf("state_dir = %q\ngoray_binary = %q\nip_range = \"127.0.4.1-127.0.4.254\"\n", stateDir, gorayBin))
	return providertest.PluginClient(ctx, t, conn, v, "local")
}

// TestConformancePlugin runs the conformance suite through the plugin
// binary under a real plugin host, with real nodes joining a real head; a
// restart is a second plugin process on the same state_dir.
func TestConformancePlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	head := headtest.StartHead(ctx, t, gorayBin)
	dir := stateDir(t)
	p, _ := launch(t, dir)
	failing := headtest.FailingGoray(t, headtest.ShortTempDir(t, "glf"))
	providertest.Run(t, func(*testing.T) provider.Provider { return p }, providertest.Options{
		Node: provider.NodeSpec{
			HeadAddress: head.Addr,
			AuthToken:   head.Token,
			Resources:   map[string]float64{provider.ResourceCPU: 1, provider.ResourceObjectStoreMemory: 32 << 20},
		},
		FailingLaunch: func(r *provider.LaunchRequest) { r.Node.GorayBinary = failing },
		Restart: func(t *testing.T, _ provider.Provider) provider.Provider {
			p, _ := launch(t, dir)
			return p
		},
	})
}

// TestPluginKilled: a node outlives its provider plugin killed with
// SIGKILL, and a new plugin process finds and terminates it.
func TestPluginKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	head := headtest.StartHead(ctx, t, gorayBin)
	dir := stateDir(t)
	p, pid := launch(t, dir)
	req := &provider.LaunchRequest{RequestID: "r1", ClusterName: "killed", NodeType: "cpu", Count: 1,
		Node: provider.NodeSpec{HeadAddress: head.Addr, AuthToken: head.Token,
			Resources: map[string]float64{provider.ResourceCPU: 1, provider.ResourceObjectStoreMemory: 32 << 20}}}
	if _, err := p.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	running := func(p provider.Provider) error {
		l, err := p.List(ctx, &provider.ListRequest{ClusterName: "killed"})
		if err != nil {
			return err
		}
		if len(l.Instances) != 1 || l.Instances[0].State != provider.StateRunning {
			return fmt.Errorf("List shows %+v; want one running instance", l.Instances)
		}
		return nil
	}
	if err := plugintest.Eventually(ctx, func() error { return running(p) }); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, err := p.List(ctx, &provider.ListRequest{ClusterName: "killed"})
	if err == nil {
		// The host may have restarted it already; either way the node lives.
		t.Log("the host restarted the plugin already")
	} else if !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("List on a killed plugin: %v; want ErrUnavailable", err)
	}
	err = plugintest.Eventually(ctx, func() error {
		s, err := head.Status(ctx)
		if err != nil {
			return err
		}
		if s.AliveNodes != 2 {
			return fmt.Errorf("%d alive nodes, want 2", s.AliveNodes)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the node died with its provider: %v", err)
	}
	p2, _ := launch(t, dir)
	if err := running(p2); err != nil {
		t.Fatalf("a new plugin: %v", err)
	}
	if _, err := p2.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := running(p2); err != nil {
		t.Fatalf("after the launch was repeated: %v", err)
	}
	l, err := p2.List(ctx, &provider.ListRequest{ClusterName: "killed"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Terminate(ctx, &provider.TerminateRequest{ClusterName: "killed", InstanceIDs: []string{l.Instances[0].ID}}); err != nil {
		t.Fatal(err)
	}
	err = plugintest.Eventually(ctx, func() error {
		l, err := p2.List(ctx, &provider.ListRequest{ClusterName: "killed"})
		if err != nil || len(l.Instances) > 0 {
			return fmt.Errorf("List: %+v, %v", l, err)
		}
		if left := headtest.Processes(dir); len(left) > 0 {
			return fmt.Errorf("processes left: %v", left)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
