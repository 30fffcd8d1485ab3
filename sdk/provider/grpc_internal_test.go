package provider

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/sdk/plugin"
)

// Status errors without goray's detail (an older plugin, a dead
// connection) still map to the sentinel errors by code.
func TestFromStatusByCode(t *testing.T) {
	tests := []struct {
		code  codes.Code
		match error
	}{
		{codes.InvalidArgument, ErrInvalidRequest},
		{codes.ResourceExhausted, ErrQuotaExceeded},
		{codes.NotFound, ErrNotFound},
		{codes.Unavailable, ErrUnavailable},
		{codes.DeadlineExceeded, context.DeadlineExceeded},
		{codes.Canceled, context.Canceled},
	}
	// The caller's context has ended, as when its own cancel ended the call.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	w := where{op: OpLaunch, cluster: "c", requestID: "r"}
	for _, tc := range tests {
		err := fromStatus(done, w, status.Error(tc.code, "x"), nil)
		if !errors.Is(err, tc.match) {
			t.Errorf("code %v: %v does not match %v", tc.code, err, tc.match)
		}
		if status.Code(err) != tc.code {
			t.Errorf("code %v: the status code is lost: %v", tc.code, status.Code(err))
		}
		var pe *ProviderError
		if !errors.As(err, &pe) || pe.Op != OpLaunch || pe.Cluster != "c" || pe.RequestID != "r" {
			t.Errorf("code %v: %v is not a ProviderError of launch in c, request r", tc.code, err)
		}
	}
	err := fromStatus(context.Background(), w, status.Error(codes.Unimplemented, "no such method"), nil)
	for _, s := range []error{ErrInvalidRequest, ErrQuotaExceeded, ErrNotFound, ErrUnavailable} {
		if errors.Is(err, s) {
			t.Errorf("Unimplemented matches %v", s)
		}
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("Unimplemented became code %v", status.Code(err))
	}
	// A call cancelled while the caller's context lives lost its plugin.
	err = fromStatus(context.Background(), w, status.Error(codes.Canceled, "conn closing"), nil)
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, context.Canceled) {
		t.Errorf("a lost connection gives %v; want ErrUnavailable", err)
	}
}

func TestToStatusRoundTrip(t *testing.T) {
	for _, e := range []error{ErrInvalidRequest, ErrUnavailable, ErrQuotaExceeded, ErrNotFound, context.Canceled, context.DeadlineExceeded} {
		in := Errorf(OpTerminate, "demo", "r1", "%w: details", e)
		out := fromStatus(context.Background(), where{op: OpList}, toStatus(where{op: OpList}, in, nil), nil)
		if !errors.Is(out, e) {
			t.Errorf("%v became %v", e, out)
		}
		var pe *ProviderError
		if !errors.As(out, &pe) || pe.Op != OpTerminate || pe.Cluster != "demo" || pe.RequestID != "r1" {
			t.Errorf("%v: op, cluster and request not kept: %#v", e, pe)
		}
		if out.Error() != in.Error() {
			t.Errorf("message %q became %q", in.Error(), out.Error())
		}
	}
	// An error of two kinds matches both on the far side.
	both := errors.Join(ErrUnavailable, context.DeadlineExceeded)
	out := fromStatus(context.Background(), where{op: OpLaunch}, toStatus(where{op: OpLaunch}, both, nil), nil)
	if !errors.Is(out, ErrUnavailable) || !errors.Is(out, context.DeadlineExceeded) {
		t.Errorf("an error of two kinds became %v", out)
	}
	// A plain error keeps its message and matches no kind.
	out = fromStatus(context.Background(), where{op: OpList, cluster: "c"}, toStatus(where{op: OpList, cluster: "c"}, errors.New("plain"), nil), nil)
	if out.Error() != `provider list (cluster "c"): plain` {
		t.Errorf("a plain error became %q", out)
	}
	for _, s := range []error{ErrInvalidRequest, ErrQuotaExceeded, ErrNotFound, ErrUnavailable} {
		if errors.Is(out, s) {
			t.Errorf("a plain error matches %v", s)
		}
	}
}

func TestProviderErrorMessage(t *testing.T) {
	cause := errors.New("boom")
	tests := []struct {
		err  ProviderError
		want string
	}{
		{ProviderError{Op: OpLaunch, Cluster: "demo", RequestID: "r1", Err: cause}, `provider launch (cluster "demo", request "r1"): boom`},
		{ProviderError{Op: OpList, Cluster: "demo", Err: cause}, `provider list (cluster "demo"): boom`},
		{ProviderError{Op: OpTerminate, RequestID: "r2", Err: cause}, `provider terminate (request "r2"): boom`},
		{ProviderError{Op: OpNodeConfigSchema, Err: cause}, `provider node_config_schema: boom`},
	}
	for _, tc := range tests {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
		if !errors.Is(&tc.err, cause) {
			t.Errorf("%q does not unwrap to its cause", tc.want)
		}
	}
}

// TestSchemaWire: a node_config schema crosses the wire with its defaults
// in canonical form.
func TestSchemaWire(t *testing.T) {
	type Disk struct {
		Size int64 `hcl:"size,size" default:"10GiB"`
	}
	type NodeConfig struct {
		Machine string            `hcl:"machine,required" doc:"Machine type."`
		Spot    bool              `hcl:"spot" default:"true"`
		Count   int               `hcl:"count" default:"3"`
		Boot    time.Duration     `hcl:"boot_timeout" default:"90s"`
		Memory  int64             `hcl:"memory,size" default:"2GiB"`
		Zones   []string          `hcl:"zones" default:"[\"a\", \"b\"]"`
		Tags    map[string]string `hcl:"tags" default:"{\"team\": \"ml\"}"`
		Secret  string            `hcl:"secret,sensitive"`
		Disks   []Disk            `hcl:"disk"`
		Network *struct {
			Name string `hcl:"name" default:"default"`
		} `hcl:"network"`
	}
	s, err := plugin.SchemaOf[NodeConfig]()
	if err != nil {
		t.Fatal(err)
	}
	s.Attributes["timeout_as_duration"] = plugin.Attribute{Type: plugin.TypeDuration, Default: 2 * time.Minute}
	b, err := schemaToJSON(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := schemaFromJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"spot": true, "count": 3.0, "boot_timeout": "90s", "memory": int64(2 << 30),
		"zones": []any{"a", "b"}, "tags": map[string]any{"team": "ml"}, "timeout_as_duration": "2m0s",
	}
	for name, d := range want {
		if a := got.Attributes[name]; !reflect.DeepEqual(a.Default, d) {
			t.Errorf("default of %q: %#v (%T), want %#v (%T)", name, a.Default, a.Default, d, d)
		}
	}
	if a := got.Attributes["machine"]; !a.Required || a.Description != "Machine type." || a.Type != plugin.TypeString {
		t.Errorf("machine: %+v", a)
	}
	if !got.Attributes["secret"].Sensitive {
		t.Error("secret is no longer sensitive")
	}
	if d := got.Blocks["disk"]; !d.Repeated || d.Schema.Attributes["size"].Default != int64(10<<30) {
		t.Errorf("disk block: %+v", d)
	}
	if n := got.Blocks["network"]; n.Repeated || n.Schema.Attributes["name"].Default != "default" {
		t.Errorf("network block: %+v", n)
	}
	// A config decodes the same against both.
	cfg := map[string]any{"machine": "m1", "disk": []any{map[string]any{}}}
	a, errA := plugin.NormalizeConfig(s, cfg)
	c, errC := plugin.NormalizeConfig(got, cfg)
	if errA != nil || errC != nil || !reflect.DeepEqual(a, c) {
		t.Errorf("a config decodes differently: %v (%v) and %v (%v)", a, errA, c, errC)
	}
	if _, err := schemaToJSON(plugin.Schema{Attributes: map[string]plugin.Attribute{"x": {Type: "nope"}}}); !errors.Is(err, plugin.ErrInvalidSchema) {
		t.Errorf("an invalid schema: %v", err)
	}
	if _, err := schemaFromJSON([]byte(`{"attributes": {"x": {"type": "nope"}}}`)); !errors.Is(err, plugin.ErrInvalidSchema) {
		t.Errorf("an invalid schema from the plugin: %v", err)
	}
	if _, err := schemaFromJSON([]byte(`{`)); err == nil || !strings.Contains(err.Error(), "does not decode") {
		t.Errorf("a schema that does not decode: %v", err)
	}
}

func TestTokenSet(t *testing.T) {
	var s tokenSet
	s.add("short")
	s.add("")
	for i := range maxTokens + 2 {
		s.add(strings.Repeat(string(rune('a'+i)), 10))
	}
	s.add(strings.Repeat("c", 10)) // seen again: kept as most recent
	text := "short " + strings.Repeat("a", 10) + " " + strings.Repeat("c", 10) + " " + strings.Repeat(string(rune('a'+maxTokens+1)), 10)
	got := s.redact(text)
	want := "short " + strings.Repeat("a", 10) + " <redacted> <redacted>"
	if got != want {
		t.Errorf("redact(%q) = %q, want %q (the oldest token is forgotten, short ones never kept)", text, got, want)
	}
	var nilSet *tokenSet
	if nilSet.redact("x") != "x" {
		t.Error("a nil set changes text")
	}
}
