package main

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/internal/testservers/sshdtest"
	"github.com/goray-dev/goray/plugins/ssh/internal/sshtest"
	"github.com/goray-dev/goray/sdk/plugin/plugintest"
	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/providertest"
	"github.com/goray-dev/goray/sdk/provider/providertest/headtest"
)

// Binaries built once by TestMain.
var pluginBin, gorayBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gsp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if pluginBin, err = host.BuildPlugin(dir, ".", "goray-provider-ssh"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if gorayBin, err = headtest.BuildGoray(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// launch starts the plugin binary through a real plugin host with the
// hosts' config and returns a provider client of it and the plugin's pid.
func launch(t *testing.T, hosts *sshtest.Hosts, stateDir string) (provider.Provider, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, v := host.Launch(ctx, t, pluginBin, "provider", "ssh", sshtest.HCL(hosts.Config(gorayBin, stateDir)))
	return providertest.PluginClient(ctx, t, conn, v, "ssh")
}

// TestConformancePlugin runs the conformance suite through the plugin
// binary under a real plugin host, with real nodes started over real SSH
// joining a real head; a restart is a second plugin process on the same
// state_dir.
func TestConformancePlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hosts, _ := startHosts(t, "127.0.5.1", "127.0.5.2", "127.0.5.3", "127.0.5.4", "127.0.5.5", "127.0.5.6")
	head := headtest.StartHead(ctx, t, gorayBin)
	dir := headtest.ShortTempDir(t, "gss")
	p, _ := launch(t, hosts, dir)
	failing := headtest.FailingGoray(t, headtest.ShortTempDir(t, "gsf"))
	providertest.Run(t, func(*testing.T) provider.Provider { return p }, providertest.Options{
		Node: provider.NodeSpec{
			HeadAddress: head.Addr,
			AuthToken:   head.Token,
			Resources:   map[string]float64{provider.ResourceCPU: 1, provider.ResourceObjectStoreMemory: 32 << 20},
		},
		FailingLaunch: func(r *provider.LaunchRequest) { r.Node.GorayBinary = failing },
		Restart: func(t *testing.T, _ provider.Provider) provider.Provider {
			p, _ := launch(t, hosts, dir)
			return p
		},
	})
}

// TestPluginKilledMidLaunch: the plugin is killed with SIGKILL while a
// launch waits in its setup commands; a new plugin process on the same
// state_dir resumes it, and exactly one node comes up on the host.
func TestPluginKilledMidLaunch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hosts, _ := startHosts(t, "127.0.5.7")
	head := headtest.StartHead(ctx, t, gorayBin)
	dir := headtest.ShortTempDir(t, "gss")
	p, pid := launch(t, hosts, dir)
	gate := headtest.ShortTempDir(t, "gsg")
	node := provider.NodeSpec{HeadAddress: head.Addr, AuthToken: head.Token,
		Resources:     map[string]float64{provider.ResourceCPU: 1, provider.ResourceObjectStoreMemory: 32 << 20},
		SetupCommands: []string{"touch " + gate + "/waiting", "while [ ! -e " + gate + "/go ]; do sleep 0.05; done"}}
	req := &provider.LaunchRequest{RequestID: "r1", ClusterName: "killed", NodeType: "cpu", Count: 1, Node: node}
	if _, err := p.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	err := plugintest.Eventually(ctx, func() error {
		_, err := os.Stat(gate + "/waiting")
		return err
	})
	if err != nil {
		t.Fatalf("the setup commands never ran: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p2, _ := launch(t, hosts, dir)
	if err := os.WriteFile(gate+"/go", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var id string
	err = plugintest.Eventually(ctx, func() error {
		l, err := p2.List(ctx, &provider.ListRequest{ClusterName: "killed"})
		if err != nil {
			return err
		}
		if len(l.Instances) != 1 || l.Instances[0].State != provider.StateRunning {
			return fmt.Errorf("List shows %+v; want one running instance", l.Instances)
		}
		id = l.Instances[0].ID
		s, err := head.Status(ctx)
		if err != nil {
			return err
		}
		if s.AliveNodes != 2 {
			return fmt.Errorf("%d alive nodes, want the head and one", s.AliveNodes)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the launch was not resumed: %v", err)
	}
	if _, err := p2.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Terminate(ctx, &provider.TerminateRequest{ClusterName: "killed", InstanceIDs: []string{id}}); err != nil {
		t.Fatal(err)
	}
	err = plugintest.Eventually(ctx, func() error {
		l, err := p2.List(ctx, &provider.ListRequest{ClusterName: "killed"})
		if err != nil || len(l.Instances) > 0 {
			return fmt.Errorf("List: %+v, %v", l, err)
		}
		if left := headtest.Processes(hosts.Root); len(left) > 0 {
			return fmt.Errorf("processes left: %v", left)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// startHosts starts an sshd on the loopback addresses ips (each a host)
// and returns the hosts, each with a remote_dir of its own, and the
// server.
func startHosts(t *testing.T, ips ...string) (*sshtest.Hosts, *sshdtest.Server) {
	t.Helper()
	srv := sshdtest.Start(t, ips...)
	return sshtest.NewHosts(t, srv.Addrs, srv.User, srv.KeyFile, srv.KnownHostsFile), srv
}
