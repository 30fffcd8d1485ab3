package sshprovider_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/plugins/ssh/internal/sshtest"
	"github.com/goray-dev/goray/plugins/ssh/sshprovider"
	"github.com/goray-dev/goray/sdk/plugin/plugintest"
	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/providertest"
	"github.com/goray-dev/goray/sdk/provider/providertest/headtest"
)

// fakeNode is a node spec for launches that fail before a node starts.
func fakeNode() provider.NodeSpec {
	return provider.NodeSpec{HeadAddress: "127.0.0.1:1", AuthToken: "fake-cluster-token-0123456789",
		Resources: map[string]float64{provider.ResourceCPU: 1}}
}

// launchFails launches one instance in cluster and returns the launch
// error PollErrors reports for it, checking that the instance is gone
// from List and that the error names what went wrong and never shows the
// token.
func launchFails(ctx context.Context, t *testing.T, p provider.Provider, cluster string, node provider.NodeSpec, nodeConfig string, want ...string) provider.LaunchError {
	t.Helper()
	if _, err := p.Launch(ctx, launchReq("r-"+cluster, cluster, 1, node, nodeConfig)); err != nil {
		t.Fatalf("the launch was not accepted: %v", err)
	}
	le := waitErrors(ctx, t, p, cluster, 1)[0]
	if le.Op != provider.ErrorOpLaunch || le.RequestID != "r-"+cluster || le.NodeType != "cpu" || le.InstanceID == "" {
		t.Errorf("launch error %+v; want op launch, request r-%s, node type cpu and the instance", le, cluster)
	}
	for _, w := range want {
		if !strings.Contains(le.Message, w) {
			t.Errorf("the launch error says %q; want it to say %q", le.Message, w)
		}
	}
	if strings.Contains(le.Message, node.AuthToken) {
		t.Errorf("the launch error shows the token: %q", le.Message)
	}
	waitInstances(ctx, t, p, cluster, 0, provider.StatePending)
	return le
}

// TestHostKeyRefused: a host whose key is not the one known_hosts lists,
// or that known_hosts does not list, is refused: the launch fails with an
// error naming the host and the known_hosts file, and nothing is done on
// the host. Listing reports the host too, and never counts it free.
func TestHostKeyRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hosts, srv := startHosts(t, "127.0.2.1")
	for _, tc := range []struct {
		name       string
		knownHosts string
		want       string
	}{
		{"wrong key", srv.WrongKnownHosts(t), "does not match known_hosts file"},
		{"unknown host", filepath.Join(t.TempDir(), "empty_known_hosts"), "is not in known_hosts file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(tc.knownHosts); err != nil {
				if err := os.WriteFile(tc.knownHosts, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg := hosts.Config(gorayBin, stateDir(t))
			cfg.KnownHostsFile = tc.knownHosts
			p := open(t, cfg)
			le := launchFails(ctx, t, p, "hostkey", fakeNode(), "", hosts.Addrs[0], tc.knownHosts, tc.want, "refusing to connect")
			t.Logf("the launch error: %s", le.Message)
			if _, err := os.Stat(hosts.RemoteDir("127.0.2.1")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the provider created its remote_dir on a host it refused: %v", err)
			}
		})
	}
}

// TestUnreachableHost: a launch onto a host where nothing listens fails
// with an error naming the host; a host that goes away while it runs a
// node keeps its instance as last seen and is reported once, until it
// answers again (then the node can be terminated). No goroutine is left
// once the provider is closed.
func TestUnreachableHost(t *testing.T) {
	leaktest.Goroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hosts, srv := startHosts(t, "127.0.2.1")
	dead := sshtest.Unreachable(t, "127.0.2.9")
	cfg := hosts.Config(gorayBin, stateDir(t))
	cfg.Hosts = append(cfg.Hosts, dead)
	p := open(t, cfg)
	launchFails(ctx, t, p, "unreachable", fakeNode(), `{"hosts": ["`+dead+`"]}`, "host "+dead, "connecting", "connection refused")

	// A host that goes away while its node runs.
	head := headtest.StartHead(ctx, t, gorayBin)
	if _, err := p.Launch(ctx, launchReq("r1", "outage", 1, conformanceNode(head), `{"hosts": ["`+hosts.Addrs[0]+`"]}`)); err != nil {
		t.Fatal(err)
	}
	in := waitInstances(ctx, t, p, "outage", 1, provider.StateRunning)[0]
	srv.Stop()
	// Every List shows the instance as last seen, until (and after) a
	// scan finds the host gone and PollErrors reports it, once.
	var reported []provider.LaunchError
	err := plugintest.Eventually(ctx, func() error {
		l, err := p.List(ctx, &provider.ListRequest{ClusterName: "outage"})
		if err != nil {
			t.Fatalf("List with a host away: %v", err)
		}
		if len(l.Instances) != 1 || l.Instances[0].ID != in.ID || l.Instances[0].State != provider.StateRunning {
			t.Fatalf("List with the host away shows %+v; want %s as last seen (running)", l.Instances, in.ID)
		}
		r, err := p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: "outage"})
		if err != nil {
			return err
		}
		reported = append(reported, r.Errors...)
		if len(reported) == 0 {
			return errors.New("the outage is not reported")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	le := reported[0]
	if len(reported) != 1 || !strings.Contains(le.Message, "host "+hosts.Addrs[0]+" cannot be reached") || le.InstanceID != in.ID {
		t.Errorf("the outage is reported as %+v; want once, naming host %s and instance %s", reported, hosts.Addrs[0], in.ID)
	}
	// Scans go on (a failed host is asked again after a while); the
	// outage is not reported again.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := p.List(ctx, &provider.ListRequest{ClusterName: "outage"}); err != nil {
			t.Fatal(err)
		}
		if r, err := p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: "outage"}); err != nil || len(r.Errors) != 0 {
			t.Fatalf("the outage was reported again: %+v, %v", r, err)
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
	srv.Restart()
	waitInstances(ctx, t, p, "outage", 1, provider.StateRunning)
	terminateAll(ctx, t, p, "outage")
	if left := headtest.Processes(hosts.Root); len(left) > 0 {
		t.Fatalf("processes left: %v", left)
	}
}

// TestSetupFails: setup commands that fail make the launch fail with
// their output and the host; the host is left clean and free.
func TestSetupFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hosts, _ := startHosts(t, "127.0.2.1")
	p := open(t, hosts.Config(gorayBin, stateDir(t)))
	node := fakeNode()
	node.SetupCommands = []string{"echo preparing", "echo 'no such package' >&2; exit 7", "echo never"}
	launchFails(ctx, t, p, "setup", node, "", "host "+hosts.Addrs[0], "running the setup commands", "exit status 7", "no such package")
	for _, f := range []string{"n", "token", "instance.json"} {
		if _, err := os.Stat(filepath.Join(hosts.RemoteDir("127.0.2.1"), f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left on the host after a failed launch: %v", f, err)
		}
	}
}

// TestRestartFromHosts: a provider that lost its state_dir finds the
// running nodes again from the hosts alone (ids, node types, request
// ids), does not launch their requests again, and terminates them.
func TestRestartFromHosts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hosts, _ := startHosts(t, "127.0.2.1", "127.0.2.2", "127.0.2.3")
	head := headtest.StartHead(ctx, t, gorayBin)
	first := open(t, hosts.Config(gorayBin, stateDir(t)))
	if _, err := first.Launch(ctx, launchReq("r1", "adopt", 2, conformanceNode(head), "")); err != nil {
		t.Fatal(err)
	}
	before := waitInstances(ctx, t, first, "adopt", 2, provider.StateRunning)
	_ = first.Close()

	second := open(t, hosts.Config(gorayBin, stateDir(t)))
	after := waitInstances(ctx, t, second, "adopt", 2, provider.StateRunning)
	for _, b := range before {
		found := false
		for _, a := range after {
			if a.ID == b.ID && a.RequestID == "r1" && a.NodeType == "cpu" && a.Address == b.Address {
				found = true
			}
		}
		if !found {
			t.Errorf("instance %+v is not listed by a provider with a fresh state_dir: %+v", b, after)
		}
	}
	if l, err := second.List(ctx, &provider.ListRequest{ClusterName: "other"}); err != nil || len(l.Instances) != 0 {
		t.Errorf("another cluster lists %+v, %v", l, err)
	}
	// The request is known: sent again, it launches nothing.
	if _, err := second.Launch(ctx, launchReq("r1", "adopt", 2, conformanceNode(head), "")); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Launch(ctx, launchReq("r2", "adopt", 1, conformanceNode(head), "")); err != nil {
		t.Fatal(err)
	}
	ins := waitInstances(ctx, t, second, "adopt", 3, provider.StateRunning)
	for _, in := range ins {
		if in.RequestID == "r2" && (in.ID == before[0].ID || in.ID == before[1].ID) {
			t.Errorf("a new instance got the id of an adopted one: %s", in.ID)
		}
	}
	terminateAll(ctx, t, second, "adopt")
	if left := headtest.Processes(hosts.Root); len(left) > 0 {
		t.Fatalf("processes left: %v", left)
	}
}

// TestConformanceOverGRPC runs the suite through the SDK's gRPC bridge.
func TestConformanceOverGRPC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hosts, _ := startHosts(t, testIPs...)
	head := headtest.StartHead(ctx, t, gorayBin)
	cfg := hosts.Config(gorayBin, stateDir(t))
	c := providertest.OverGRPC(t, open(t, cfg))
	failing := headtest.FailingGoray(t, headtest.ShortTempDir(t, "gsf"))
	providertest.Run(t, func(*testing.T) provider.Provider { return c }, providertest.Options{
		Node:          conformanceNode(head),
		FailingLaunch: func(r *provider.LaunchRequest) { r.Node.GorayBinary = failing },
		Restart: func(t *testing.T, _ provider.Provider) provider.Provider {
			return providertest.OverGRPC(t, open(t, cfg))
		},
	})
}

// TestConfigure: the config's mistakes are refused with what is wrong;
// the defaults fill in what is left out.
func TestConfigure(t *testing.T) {
	hosts, _ := startHosts(t, "127.0.2.1")
	good := func() sshprovider.Config { return hosts.Config(gorayBin, stateDir(t)) }
	encrypted := filepath.Join(t.TempDir(), "encrypted")
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(encrypted, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		mod  func(*sshprovider.Config)
		err  string
	}{
		{"ok", func(*sshprovider.Config) {}, ""},
		{"no hosts", func(c *sshprovider.Config) { c.Hosts = nil }, "hosts is empty"},
		{"duplicate", func(c *sshprovider.Config) { c.Hosts = []string{"10.0.0.1", "10.0.0.1:22"} }, `"10.0.0.1:22" is listed twice`},
		{"bad host", func(c *sshprovider.Config) { c.Hosts = []string{"a b"} }, `"a b" is not a host name or address`},
		{"bad port", func(c *sshprovider.Config) { c.Hosts = []string{"h:99999"} }, `"h:99999" has no valid port`},
		{"ipv6", func(c *sshprovider.Config) { c.Hosts = []string{"::1", "[::1]:2222"}; c.RemoteDir = "/tmp/g-{port}" }, ""},
		{"shared remote_dir", func(c *sshprovider.Config) { c.Hosts = []string{"h:22", "h:2222"}; c.RemoteDir = "/tmp/g" }, "put {port} in remote_dir"},
		{"no known_hosts", func(c *sshprovider.Config) { c.KnownHostsFile = "" }, "known_hosts_file is required"},
		{"missing known_hosts", func(c *sshprovider.Config) { c.KnownHostsFile = "/nonexistent/known_hosts" }, "known_hosts_file /nonexistent/known_hosts"},
		{"relative remote_dir", func(c *sshprovider.Config) { c.RemoteDir = "goray" }, `remote_dir "goray" is not an absolute path`},
		{"long remote_dir", func(c *sshprovider.Config) { c.RemoteDir = "/tmp/" + strings.Repeat("x", 30) }, "use a remote_dir of at most 32 bytes"},
		{"missing key", func(c *sshprovider.Config) { c.PrivateKeyFile = "/nonexistent/key" }, "private_key_file"},
		{"encrypted key", func(c *sshprovider.Config) { c.PrivateKeyFile = encrypted }, "is encrypted: load it into an ssh agent"},
		{"no key, no agent", func(c *sshprovider.Config) { c.PrivateKeyFile = ""; t.Setenv("SSH_AUTH_SOCK", "") }, "no ssh agent"},
		{"missing goray", func(c *sshprovider.Config) { c.GorayBinary = "/nonexistent/goray" }, `goray_binary "/nonexistent/goray"`},
		{"no connect timeout", func(c *sshprovider.Config) { c.ConnectTimeout = 0 }, "connect_timeout 0s is not positive"},
		{"relative state_dir", func(c *sshprovider.Config) { c.StateDir = "state" }, `state_dir "state" is not an absolute path`},
	}
	for _, tc := range tests {
		cfg := good()
		tc.mod(&cfg)
		p, err := sshprovider.Open(context.Background(), cfg)
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
		if p != nil {
			_ = p.Close()
		}
	}
	// Through the plugin's typed config: defaults and the schema.
	p := sshprovider.New()
	defer p.Close()
	spec := p.ConfigSpec()
	if err := spec.Err(); err != nil {
		t.Fatal(err)
	}
	attrs := spec.Schema().Attributes
	if d := attrs["port"].Default; d != float64(22) && d != 22 && d != int64(22) {
		t.Errorf("port default %v (%T)", d, d)
	}
	if !attrs["hosts"].Required || !attrs["known_hosts_file"].Required {
		t.Error("hosts and known_hosts_file are not required")
	}
	if err := p.Health(context.Background()); err == nil {
		t.Error("an unconfigured provider is healthy")
	}
	_, err = p.List(context.Background(), &provider.ListRequest{ClusterName: "c"})
	if !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("List before Configure: %v; want ErrUnavailable", err)
	}
	dir := stateDir(t)
	err = spec.Configure(context.Background(), map[string]any{"hosts": []any{hosts.Addrs[0]}, "known_hosts_file": hosts.KnownHostsFile,
		"private_key_file": hosts.KeyFile, "state_dir": dir, "remote_dir": hosts.RemoteDir("x")})
	if err != nil {
		t.Fatalf("Configure with the defaults: %v", err)
	}
	if err := p.Health(context.Background()); err != nil {
		t.Errorf("a configured provider: %v", err)
	}
}
