package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/internal/testservers/mototest"
	"github.com/goray-dev/goray/plugins/aws/awsprovider"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/plugin/hclspec"
	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/providertest"
)

// pluginBin is the plugin binary, built by TestMain.
var pluginBin string

func TestMain(m *testing.M) { os.Exit(host.RunWithPlugin(m, "goray-provider-aws", &pluginBin)) }

// failMarker is the node_config tag whose launches the proxy ends at once
// (mototest.Proxy.TerminateMarked): the suite's failing launch.
const failMarker = "mototest-terminate-at-once"

// launch starts the plugin binary under a real plugin host, configured for
// the EC2 API at endpoint, and returns a provider client of it.
func launch(t *testing.T, endpoint string) provider.Provider {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, v := host.Launch(ctx, t, pluginBin, "provider", "aws", fmt.Sprintf(`
region                 = %q
endpoint               = %q
access_key             = %q
secret_key             = %q
goray_url              = "https://downloads.example.com/goray"
goray_sha256           = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
max_retries            = 2
retry_initial_interval = "10ms"
retry_max_interval     = "50ms"
`, mototest.Region, endpoint, mototest.AccessKey, mototest.SecretKey))
	p, _ := providertest.PluginClient(ctx, t, conn, v, "aws")
	return p
}

// TestConformancePlugin runs the conformance suite through the plugin
// binary under a real plugin host, against moto; a restart is a second
// plugin process.
func TestConformancePlugin(t *testing.T) {
	moto := mototest.Start(t)
	proxy := mototest.NewProxy(t, moto.Endpoint)
	proxy.TerminateMarked(t, moto, failMarker)
	p := launch(t, proxy.URL)
	nodeConfig := func(extra string) []byte {
		return []byte(fmt.Sprintf(`{"instance_type": %q, "image_id": %q%s}`, mototest.InstanceType, mototest.ImageID, extra))
	}
	providertest.Run(t, func(*testing.T) provider.Provider { return p }, providertest.Options{
		NodeConfig: nodeConfig(""),
		Node:       provider.NodeSpec{HeadAddress: "10.0.0.1:6380", Resources: map[string]float64{provider.ResourceCPU: 1}},
		FailingLaunch: func(r *provider.LaunchRequest) {
			r.NodeConfig = nodeConfig(`, "tags": {"test": "` + failMarker + `"}`)
		},
		Restart:       func(t *testing.T, _ provider.Provider) provider.Provider { return launch(t, proxy.URL) },
		SettleTimeout: 30 * time.Second,
	})
}

// TestPluginErrors: errors keep their identity and EC2's code through the
// plugin process.
func TestPluginErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	moto := mototest.Start(t)
	proxy := mototest.NewProxy(t, moto.Endpoint)
	p := launch(t, proxy.URL)
	proxy.Fail("RunInstances", "InsufficientInstanceCapacity", -1)
	req := &provider.LaunchRequest{RequestID: "r1", ClusterName: "errs", NodeType: "cpu", Count: 1,
		NodeConfig: []byte(fmt.Sprintf(`{"instance_type": %q, "image_id": %q}`, mototest.InstanceType, mototest.ImageID)),
		Node:       provider.NodeSpec{HeadAddress: "10.0.0.1:6380", AuthToken: "plugin-errors-token-0123456789"}}
	_, err := p.Launch(ctx, req)
	if !errors.Is(err, provider.ErrQuotaExceeded) || !regexp.MustCompile(`InsufficientInstanceCapacity.*\(3 attempts\)`).MatchString(err.Error()) {
		t.Errorf("a launch without capacity, through the plugin: %v; want ErrQuotaExceeded with the code and 3 attempts", err)
	}
	proxy.Clear()
	req.NodeConfig = []byte(`{"instance_type": "t3.micro", "image_id": "ami-nothex"}`)
	if _, err := p.Launch(ctx, req); !errors.Is(err, provider.ErrInvalidRequest) || !regexp.MustCompile(`image_id "ami-nothex"`).MatchString(err.Error()) {
		t.Errorf("a bad image id, through the plugin: %v", err)
	}
}

// TestDocClusterFile: the cluster file of docs/aws.md loads, and its
// provider config and node_configs decode against the plugin's schemas
// and pass its checks.
func TestDocClusterFile(t *testing.T) {
	// The AWS environment of this machine must not matter.
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
	src, err := os.ReadFile("../../docs/aws.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```hcl\n(.*?)```").FindAllSubmatch(src, -1)
	if len(m) != 1 {
		t.Fatalf("docs/aws.md has %d hcl blocks; want the one cluster file", len(m))
	}
	c, diags := config.ParseCluster(m[0][1], "aws.md")
	if diags.HasErrors() {
		t.Fatalf("the cluster file:\n%s", config.FormatDiagnostics(diags, c.Files(), 0, false))
	}
	if c.Provider.Name != awsprovider.Name {
		t.Fatalf("the provider is %q", c.Provider.Name)
	}
	p := awsprovider.New()
	spec := p.ConfigSpec()
	raw, diags := hclspec.Decode(c.Provider.Config, spec.Schema(), c.Provider.DeclRange)
	if diags.HasErrors() {
		t.Fatalf("the provider's config:\n%s", config.FormatDiagnostics(diags, c.Files(), 0, false))
	}
	if err := spec.Configure(context.Background(), raw); err != nil {
		t.Fatalf("the provider's config: %v", err)
	}
	ncs, err := plugin.SchemaOf[awsprovider.NodeConfig]()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, nt := range c.NodeTypes {
		if nt.NodeConfig == nil {
			continue
		}
		n++
		v, diags := hclspec.Decode(nt.NodeConfig, ncs, nt.NodeConfigRange)
		if diags.HasErrors() {
			t.Fatalf("node_config of %s:\n%s", nt.Name, config.FormatDiagnostics(diags, c.Files(), 0, false))
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := provider.DecodeNodeConfig[awsprovider.NodeConfig](b)
		if err == nil {
			err = nc.Validate()
		}
		if err != nil {
			t.Errorf("node_config of %s: %v", nt.Name, err)
		}
	}
	if n != 2 {
		t.Errorf("%d node types with a node_config; want the cpu and gpu types", n)
	}
}
