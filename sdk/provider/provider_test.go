package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/internal/memprovider"
	"github.com/goray-dev/goray/sdk/provider/providertest"
)

const token = "0123456789abcdef-the-cluster-token"

func spec() provider.NodeSpec {
	return provider.NodeSpec{
		HeadAddress:   "10.0.0.1:6379",
		Resources:     map[string]float64{"CPU": 2},
		Labels:        map[string]string{provider.LabelClusterName: "demo"},
		AuthToken:     token,
		SetupCommands: []string{"echo hi"},
		GorayBinary:   "/usr/local/bin/goray",
	}
}

// TestNodeSpecHidesToken: however a NodeSpec is printed or logged, alone
// or inside a request, the token does not show; the rest does.
func TestNodeSpecHidesToken(t *testing.T) {
	s := spec()
	req := provider.LaunchRequest{RequestID: "r1", ClusterName: "demo", NodeType: "cpu", Count: 1, Node: s}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("launch", "node", s, "req", req)
	var hclogged bytes.Buffer
	hclog.New(&hclog.LoggerOptions{Output: &hclogged, JSONFormat: true}).Info("launch", "node", s, "req", req)
	var textLogged bytes.Buffer
	hclog.New(&hclog.LoggerOptions{Output: &textLogged}).Info("launch", "node", s, "req", &req)
	js, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{
		"%v":          fmt.Sprintf("%v", s),
		"%+v":         fmt.Sprintf("%+v", s),
		"%#v":         fmt.Sprintf("%#v", s),
		"%s":          fmt.Sprintf("%s", s),
		"%q":          fmt.Sprintf("%q", s),
		"%x":          fmt.Sprintf("%x", s),
		"%d":          fmt.Sprintf("%d", s),
		"pointer %v":  fmt.Sprintf("%v", &s),
		"pointer %+v": fmt.Sprintf("%+v", &s),
		"request %v":  fmt.Sprintf("%v", req),
		"request %+v": fmt.Sprintf("%+v", req),
		"request %#v": fmt.Sprintf("%#v", req),
		"slice %v":    fmt.Sprintf("%v", []provider.NodeSpec{s}),
		"map %v":      fmt.Sprint(map[string]provider.NodeSpec{"a": s}),
		"Sprint":      fmt.Sprint(s),
		"Errorf":      fmt.Errorf("launching %v: %w", req, errors.New("x")).Error(),
		"slog":        logged.String(),
		"hclog json":  hclogged.String(),
		"hclog text":  textLogged.String(),
		"json":        string(js),
	}
	for name, out := range outputs {
		if strings.Contains(out, token) || strings.Contains(out, "the-cluster-token") {
			t.Errorf("%s shows the token: %s", name, out)
		}
		if !strings.Contains(out, "10.0.0.1:6379") {
			t.Errorf("%s does not show the head address: %s", name, out)
		}
	}
	for _, name := range []string{"%v", "%#v", "slog", "request %+v"} {
		if !strings.Contains(outputs[name], "<redacted>") {
			t.Errorf("%s does not say the token is redacted: %s", name, outputs[name])
		}
	}
	if got := fmt.Sprint(provider.NodeSpec{HeadAddress: "h:1"}); strings.Contains(got, "redacted") {
		t.Errorf("a spec without a token says it is redacted: %s", got)
	}
}

func TestRedactToken(t *testing.T) {
	tests := []struct {
		text, token, want string
	}{
		{"token=" + token + " and again " + token, token, "token=<redacted> and again <redacted>"},
		{"nothing here", token, "nothing here"},
		{"a short token stays: abc", "abc", "a short token stays: abc"},
		{"empty token", "", "empty token"},
	}
	for _, tc := range tests {
		if got := provider.RedactToken(tc.text, tc.token); got != tc.want {
			t.Errorf("RedactToken(%q, %q) = %q, want %q", tc.text, tc.token, got, tc.want)
		}
	}
}

// echoing is a provider whose errors and LaunchErrors echo the token of
// the last launch, and which panics with it on request.
type echoing struct {
	*memprovider.Provider
	last string
}

func (p *echoing) Launch(ctx context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	p.last = req.Node.AuthToken
	if req.NodeType == "panic" {
		panic("cannot launch with token " + req.Node.AuthToken)
	}
	return nil, provider.Errorf(provider.OpLaunch, req.ClusterName, req.RequestID, "%w: the cloud refused token %s", provider.ErrQuotaExceeded, req.Node.AuthToken)
}

func (p *echoing) List(context.Context, *provider.ListRequest) (*provider.ListResponse, error) {
	return nil, fmt.Errorf("%w: listing with %s", provider.ErrUnavailable, p.last)
}

func (p *echoing) PollErrors(_ context.Context, req *provider.PollErrorsRequest) (*provider.PollErrorsResponse, error) {
	return &provider.PollErrorsResponse{Errors: []provider.LaunchError{{Op: provider.ErrorOpLaunch, Message: "node said GORAY_AUTH_TOKEN=" + p.last}}}, nil
}

// TestTokenNeverCrosses: whatever a provider puts in its errors,
// LaunchErrors or panics, the token of a launch does not reach the
// client's caller, and the errors keep their kind.
func TestTokenNeverCrosses(t *testing.T) {
	ctx := context.Background()
	c := providertest.OverGRPC(t, &echoing{Provider: memprovider.New()})
	req := &provider.LaunchRequest{RequestID: "r1", ClusterName: "demo", NodeType: "cpu", Count: 1, Node: spec()}
	_, err := c.Launch(ctx, req)
	if !errors.Is(err, provider.ErrQuotaExceeded) {
		t.Errorf("Launch: %v; want ErrQuotaExceeded", err)
	}
	_, listErr := c.List(ctx, &provider.ListRequest{ClusterName: "demo"})
	if !errors.Is(listErr, provider.ErrUnavailable) {
		t.Errorf("List: %v; want ErrUnavailable", listErr)
	}
	pe, err2 := c.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: "demo"})
	if err2 != nil || len(pe.Errors) != 1 {
		t.Fatalf("PollErrors: %v, %v", pe, err2)
	}
	req.NodeType = "panic"
	_, panicErr := c.Launch(ctx, req)
	if status.Code(panicErr) != codes.Internal || !strings.Contains(panicErr.Error(), "panicked") {
		t.Errorf("a panic gives %v; want codes.Internal", panicErr)
	}
	for what, text := range map[string]string{
		"Launch error": err.Error(), "List error": listErr.Error(),
		"LaunchError": pe.Errors[0].Message, "panic": panicErr.Error(),
	} {
		if strings.Contains(text, token) {
			t.Errorf("%s shows the token: %s", what, text)
		}
		if !strings.Contains(text, "<redacted>") {
			t.Errorf("%s does not say what was redacted: %s", what, text)
		}
	}
	// In-process nothing redacts a provider's own errors: that is the
	// provider's duty (RedactToken), checked by the conformance suite.
}

// kinded returns errors of each kind.
type kinded struct {
	*memprovider.Provider
	err error
}

func (p *kinded) Terminate(context.Context, *provider.TerminateRequest) (*provider.TerminateResponse, error) {
	return nil, p.err
}

// TestErrorsAcrossGRPC: each typed error keeps its identity through the
// client, and the client names the operation, cluster and request.
func TestErrorsAcrossGRPC(t *testing.T) {
	for _, sentinel := range []error{provider.ErrInvalidRequest, provider.ErrUnavailable, provider.ErrQuotaExceeded, provider.ErrNotFound} {
		t.Run(sentinel.Error(), func(t *testing.T) {
			c := providertest.OverGRPC(t, &kinded{Provider: memprovider.New(), err: fmt.Errorf("%w: zone z1", sentinel)})
			_, err := c.Terminate(context.Background(), &provider.TerminateRequest{RequestID: "t1", ClusterName: "demo", InstanceIDs: []string{"i-1"}})
			if !errors.Is(err, sentinel) {
				t.Errorf("got %v; want one matching %v", err, sentinel)
			}
			var pe *provider.ProviderError
			if !errors.As(err, &pe) || pe.Op != provider.OpTerminate || pe.Cluster != "demo" || pe.RequestID != "t1" {
				t.Errorf("%v is not a ProviderError of terminate in demo, request t1", err)
			}
			want := fmt.Sprintf(`provider terminate (cluster "demo", request "t1"): %v: zone z1`, sentinel)
			if err.Error() != want {
				t.Errorf("message %q, want %q", err, want)
			}
		})
	}
}

// TestServerValidates: the SDK's server refuses a bad request before the
// provider sees it.
func TestServerValidates(t *testing.T) {
	seen := &countingProvider{Provider: memprovider.New()}
	c := providertest.OverGRPC(t, seen)
	_, err := c.Launch(context.Background(), &provider.LaunchRequest{ClusterName: "demo", NodeType: "cpu", Count: 1})
	if !errors.Is(err, provider.ErrInvalidRequest) || !strings.Contains(err.Error(), "the request id is empty") {
		t.Errorf("Launch without a request id: %v", err)
	}
	if seen.launches != 0 {
		t.Errorf("the provider saw %d refused launches", seen.launches)
	}
}

type countingProvider struct {
	*memprovider.Provider
	launches int
}

func (p *countingProvider) Launch(ctx context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	p.launches++
	return p.Provider.Launch(ctx, req)
}

// TestGoneServer: a plugin that went away gives ErrUnavailable.
func TestGoneServer(t *testing.T) {
	var c provider.Provider
	t.Run("serve", func(t *testing.T) { c = providertest.OverGRPC(t, memprovider.New()) })
	// The subtest's cleanup has stopped the server.
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	_, err := c.List(ctx, &provider.ListRequest{ClusterName: "demo"})
	if !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("List on a stopped plugin: %v; want ErrUnavailable", err)
	}
}

func TestValidate(t *testing.T) {
	good := func() *provider.LaunchRequest {
		return &provider.LaunchRequest{RequestID: "r", ClusterName: "c", NodeType: "t", Count: 1, NodeConfig: []byte(`{"a": 1}`)}
	}
	tests := []struct {
		name string
		req  *provider.LaunchRequest
		want string // "" for valid
	}{
		{"good", good(), ""},
		{"no node config", func() *provider.LaunchRequest { r := good(); r.NodeConfig = nil; return r }(), ""},
		{"blank node config", func() *provider.LaunchRequest { r := good(); r.NodeConfig = []byte(" \n"); return r }(), ""},
		{"nil", nil, "no launch request"},
		{"no request id", func() *provider.LaunchRequest { r := good(); r.RequestID = ""; return r }(), "the request id is empty"},
		{"no cluster", func() *provider.LaunchRequest { r := good(); r.ClusterName = ""; return r }(), "the cluster name is empty"},
		{"no node type", func() *provider.LaunchRequest { r := good(); r.NodeType = ""; return r }(), "the node type is empty"},
		{"count 0", func() *provider.LaunchRequest { r := good(); r.Count = 0; return r }(), "count is 0; want at least 1"},
		{"array config", func() *provider.LaunchRequest { r := good(); r.NodeConfig = []byte(`[]`); return r }(), "node_config is a JSON array; want an object"},
		{"null config", func() *provider.LaunchRequest { r := good(); r.NodeConfig = []byte(`null`); return r }(), "node_config is a JSON null; want an object"},
		{"bad JSON", func() *provider.LaunchRequest { r := good(); r.NodeConfig = []byte(`{`); return r }(), "node_config is not valid JSON"},
		{"trailing data", func() *provider.LaunchRequest { r := good(); r.NodeConfig = []byte(`{} {}`); return r }(), "data after its JSON object"},
		{"all wrong", &provider.LaunchRequest{Count: -2}, "the request id is empty; the cluster name is empty; the node type is empty; count is -2"},
	}
	for _, tc := range tests {
		err := tc.req.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, provider.ErrInvalidRequest) || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("%s: %v; want ErrInvalidRequest saying %q", tc.name, err, tc.want)
		}
	}
	others := []struct {
		name string
		err  error
		want string
	}{
		{"terminate ok", (&provider.TerminateRequest{ClusterName: "c", InstanceIDs: []string{"a"}}).Validate(), ""},
		{"terminate nil", (*provider.TerminateRequest)(nil).Validate(), "no terminate request"},
		{"terminate no cluster", (&provider.TerminateRequest{}).Validate(), "the cluster name is empty"},
		{"terminate empty id", (&provider.TerminateRequest{ClusterName: "c", InstanceIDs: []string{"a", ""}}).Validate(), "instance id 1 is empty"},
		{"list ok", (&provider.ListRequest{ClusterName: "c"}).Validate(), ""},
		{"list nil", (*provider.ListRequest)(nil).Validate(), "the cluster name is empty"},
		{"poll ok", (&provider.PollErrorsRequest{ClusterName: "c"}).Validate(), ""},
		{"poll empty", (&provider.PollErrorsRequest{}).Validate(), "the cluster name is empty"},
	}
	for _, tc := range others {
		switch {
		case tc.want == "" && tc.err != nil:
			t.Errorf("%s: %v", tc.name, tc.err)
		case tc.want != "" && (!errors.Is(tc.err, provider.ErrInvalidRequest) || !strings.Contains(fmt.Sprint(tc.err), tc.want)):
			t.Errorf("%s: %v; want ErrInvalidRequest saying %q", tc.name, tc.err, tc.want)
		}
	}
}

func TestCheckClusterName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"demo", true},
		{"a", true},
		{"9.x_y-z", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{"-demo", false},
		{".demo", false},
		{"_demo", false},
		{"a/b", false},
		{"..", false},
		{"a b", false},
		{"dém", false},
		{"demo\n", false},
	}
	for _, tc := range tests {
		err := provider.CheckClusterName(tc.name)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%q: %v", tc.name, err)
		case !tc.ok && (!errors.Is(err, provider.ErrInvalidRequest) || !strings.Contains(fmt.Sprint(err), "cluster name")):
			t.Errorf("%q: %v; want ErrInvalidRequest naming the cluster name", tc.name, err)
		}
	}
}

func TestDecodeNodeConfig(t *testing.T) {
	type NodeConfig struct {
		Machine string        `hcl:"machine,required"`
		Disk    int64         `hcl:"disk,size" default:"10GiB"`
		Boot    time.Duration `hcl:"boot_timeout" default:"1m"`
		Count   int           `hcl:"count" default:"1"`
	}
	tests := []struct {
		raw  string
		want NodeConfig
		err  string
	}{
		{`{"machine": "m1"}`, NodeConfig{Machine: "m1", Disk: 10 << 30, Boot: time.Minute, Count: 1}, ""},
		{`{"machine": "m1", "disk": "2GiB", "boot_timeout": "30s", "count": 3}`, NodeConfig{Machine: "m1", Disk: 2 << 30, Boot: 30 * time.Second, Count: 3}, ""},
		{`{"machine": "m1", "disk": 4096}`, NodeConfig{Machine: "m1", Disk: 4096, Boot: time.Minute, Count: 1}, ""},
		{``, NodeConfig{}, `the attribute "machine" is required`},
		{`{"machine": "m1", "zone": "a"}`, NodeConfig{}, `unknown attribute or block "zone"`},
		{`{"machine": "m1", "count": 1.5}`, NodeConfig{}, `attribute "count"`},
		{`{"machine": 3}`, NodeConfig{}, `attribute "machine"`},
		{`[1]`, NodeConfig{}, "node_config is a JSON array"},
	}
	for _, tc := range tests {
		got, err := provider.DecodeNodeConfig[NodeConfig]([]byte(tc.raw))
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("%s: %+v, %v; want %+v", tc.raw, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, provider.ErrInvalidRequest) || !strings.Contains(fmt.Sprint(err), tc.err) {
			t.Errorf("%s: %v; want ErrInvalidRequest saying %q", tc.raw, err, tc.err)
		}
	}
	_, err := provider.DecodeNodeConfig[NodeConfig]([]byte(`{"machine": "m1", "zone": "a"}`))
	if !errors.Is(err, plugin.ErrInvalidConfig) {
		t.Errorf("an unknown setting: %v does not match plugin.ErrInvalidConfig", err)
	}
}

func TestInstanceStateValid(t *testing.T) {
	for s, want := range map[provider.InstanceState]bool{
		provider.StatePending: true, provider.StateRunning: true, provider.StateTerminating: true,
		"": false, "terminated": false, "Running": false,
	} {
		if s.Valid() != want {
			t.Errorf("%q.Valid() = %v", s, !want)
		}
	}
}

// TestNilResponses: a provider that returns nil responses gives empty ones
// through the client.
func TestNilResponses(t *testing.T) {
	c := providertest.OverGRPC(t, nilProvider{})
	ctx := context.Background()
	if r, err := c.NodeConfigSchema(ctx, nil); err != nil || r == nil || len(r.Schema.Attributes) != 0 {
		t.Errorf("NodeConfigSchema: %+v, %v", r, err)
	}
	if r, err := c.List(ctx, &provider.ListRequest{ClusterName: "c"}); err != nil || r == nil || len(r.Instances) != 0 {
		t.Errorf("List: %+v, %v", r, err)
	}
	if r, err := c.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: "c"}); err != nil || r == nil || len(r.Errors) != 0 {
		t.Errorf("PollErrors: %+v, %v", r, err)
	}
}

type nilProvider struct{ provider.Provider }

func (nilProvider) NodeConfigSchema(context.Context, *provider.NodeConfigSchemaRequest) (*provider.NodeConfigSchemaResponse, error) {
	return nil, nil
}

func (nilProvider) List(context.Context, *provider.ListRequest) (*provider.ListResponse, error) {
	return nil, nil
}

func (nilProvider) PollErrors(context.Context, *provider.PollErrorsRequest) (*provider.PollErrorsResponse, error) {
	return nil, nil
}

// TestInstancesCrossTheWire: every field of an instance and a LaunchError
// survives the client and server.
func TestInstancesCrossTheWire(t *testing.T) {
	m := memprovider.New()
	c := providertest.OverGRPC(t, m)
	ctx := context.Background()
	before := time.Now()
	if _, err := c.Launch(ctx, &provider.LaunchRequest{RequestID: "r1", ClusterName: "demo", NodeType: "cpu", Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Launch(ctx, &provider.LaunchRequest{RequestID: "r2", ClusterName: "demo", NodeType: "gpu", Count: 3, NodeConfig: []byte(`{"fail": true}`)}); err != nil {
		t.Fatal(err)
	}
	direct, err := m.List(ctx, &provider.ListRequest{ClusterName: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.List(ctx, &provider.ListRequest{ClusterName: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Instances) != 1 || len(direct.Instances) != 1 {
		t.Fatalf("List: %+v; want one instance", got)
	}
	in, want := got.Instances[0], direct.Instances[0]
	want.State = provider.StateRunning // listed once more
	if in.ID != want.ID || in.NodeType != "cpu" || in.RequestID != "r1" || in.State != want.State || in.Address != want.Address || !in.LaunchedAt.Equal(want.LaunchedAt) {
		t.Errorf("over gRPC %+v; want %+v", in, want)
	}
	errs, err := c.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: "demo"})
	if err != nil || len(errs.Errors) != 1 {
		t.Fatalf("PollErrors: %+v, %v", errs, err)
	}
	le := errs.Errors[0]
	if le.Op != provider.ErrorOpLaunch || le.RequestID != "r2" || le.NodeType != "gpu" || le.Count != 3 || le.Message == "" || le.At.Before(before) {
		t.Errorf("LaunchError over gRPC: %+v", le)
	}
}
