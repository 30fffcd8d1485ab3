package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/goray-dev/goray/internal/proto/pluginv1"
	"github.com/goray-dev/goray/internal/waitfor"
)

var testSchema = Schema{
	Attributes: map[string]Attribute{
		"greeting": {Type: TypeString, Required: true},
		"size":     {Type: TypeSize, Default: "1KiB"},
		"timeout":  {Type: TypeDuration, Default: 2 * time.Second},
		"ratio":    {Type: TypeNumber},
		"on":       {Type: TypeBool},
		"tags":     {Type: TypeListString},
		"labels":   {Type: TypeMapString},
		"secret":   {Type: TypeString, Sensitive: true, Description: "a password"},
	},
	Blocks: map[string]BlockSchema{
		"limits":   {Schema: Schema{Attributes: map[string]Attribute{"max": {Type: TypeNumber, Required: true}}}},
		"endpoint": {Repeated: true, Schema: Schema{Attributes: map[string]Attribute{"address": {Type: TypeString, Required: true}}}},
	},
}

func TestSchemaValidate(t *testing.T) {
	tests := []struct {
		name   string
		schema Schema
		errs   []string
	}{
		{"valid", testSchema, nil},
		{"empty", Schema{}, nil},
		{"unknown type", Schema{Attributes: map[string]Attribute{"a": {Type: "int"}}}, []string{`attribute "a" has unknown type "int"`}},
		{"required with default", Schema{Attributes: map[string]Attribute{"a": {Type: TypeString, Required: true, Default: "x"}}},
			[]string{`attribute "a" is required and has a default`}},
		{"bad default", Schema{Attributes: map[string]Attribute{"a": {Type: TypeSize, Default: "lots"}}},
			[]string{`default of attribute "a"`, `invalid size "lots"`}},
		{"bad duration default", Schema{Attributes: map[string]Attribute{"a": {Type: TypeDuration, Default: 5}}},
			[]string{`default of attribute "a"`}},
		{"name clash", Schema{Attributes: map[string]Attribute{"a": {Type: TypeString}}, Blocks: map[string]BlockSchema{"a": {}}},
			[]string{`"a" is both an attribute and a block`}},
		{"nested", Schema{Blocks: map[string]BlockSchema{"b": {Schema: Schema{Attributes: map[string]Attribute{"c": {Type: "x"}}}}}},
			[]string{`attribute "b.c" has unknown type "x"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.schema.Validate()
			if len(tc.errs) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidSchema) {
				t.Fatalf("Validate = %v, want ErrInvalidSchema", err)
			}
			for _, want := range tc.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestNormalizeConfig(t *testing.T) {
	tests := []struct {
		name string
		in   map[string]any
		want map[string]any
		err  string
	}{
		{"defaults", map[string]any{"greeting": "hi"},
			map[string]any{"greeting": "hi", "size": int64(1024), "timeout": "2s"}, ""},
		{"json numbers and conversions",
			map[string]any{"greeting": "hi", "size": json.Number("2147483648"), "ratio": json.Number("0.5"),
				"timeout": " 1m ", "on": true, "tags": []string{"a"}, "labels": map[string]string{"k": "v"}},
			map[string]any{"greeting": "hi", "size": int64(2 << 30), "ratio": 0.5, "timeout": "1m",
				"on": true, "tags": []any{"a"}, "labels": map[string]any{"k": "v"}}, ""},
		{"size string", map[string]any{"greeting": "hi", "size": "2GiB"},
			map[string]any{"greeting": "hi", "size": int64(2 << 30), "timeout": "2s"}, ""},
		{"blocks", map[string]any{"greeting": "hi", "limits": map[string]any{"max": 3},
			"endpoint": []any{map[string]any{"address": "a"}}},
			map[string]any{"greeting": "hi", "size": int64(1024), "timeout": "2s",
				"limits": map[string]any{"max": float64(3)}, "endpoint": []any{map[string]any{"address": "a"}}}, ""},
		{"missing required", map[string]any{}, nil, `the attribute "greeting" is required`},
		{"missing nested required", map[string]any{"greeting": "x", "endpoint": []any{map[string]any{}}}, nil,
			`the attribute "endpoint[0].address" is required`},
		{"unknown", map[string]any{"greeting": "x", "nope": 1}, nil, `unknown attribute or block "nope"`},
		{"wrong type", map[string]any{"greeting": 5}, nil, `attribute "greeting": a string is required, got int`},
		{"fractional size", map[string]any{"greeting": "x", "size": 1.5}, nil, "not a whole, non-negative number of bytes"},
		{"negative size", map[string]any{"greeting": "x", "size": -1}, nil, "not a whole, non-negative number of bytes"},
		{"bad duration", map[string]any{"greeting": "x", "timeout": "soon"}, nil, `cannot parse "soon" as a duration`},
		{"list element", map[string]any{"greeting": "x", "tags": []any{"a", 1}}, nil, "element 1: a string is required"},
		{"block not object", map[string]any{"greeting": "x", "limits": 1}, nil, `block "limits": want an object`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NormalizeConfig(testSchema, tc.in)
			if tc.err != "" {
				if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want ErrInvalidConfig containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

func TestSchemaProtoRoundTrip(t *testing.T) {
	norm, err := testSchema.normalized()
	if err != nil {
		t.Fatal(err)
	}
	p, err := schemaToProto(norm)
	if err != nil {
		t.Fatal(err)
	}
	got, err := schemaFromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, norm) {
		t.Errorf("round trip:\n got  %#v\n want %#v", got, norm)
	}
	if norm.Attributes["timeout"].Default != "2s" || norm.Attributes["size"].Default != int64(1024) {
		t.Errorf("defaults not normalized: %#v", norm.Attributes)
	}
}

func TestServeConfigValidate(t *testing.T) {
	ok := ServeConfig{Kind: KindTransport, Name: "x", APIVersions: map[int]func(*grpc.Server){1: func(*grpc.Server) {}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := ServeConfig{APIVersions: map[int]func(*grpc.Server){0: nil},
		Schema: Schema{Attributes: map[string]Attribute{"a": {Type: "?"}}}}
	err := bad.Validate()
	for _, want := range []string{"Kind is empty", "Name is empty", "API version 0 is not positive",
		"API version 0 has no registration function", `attribute "a" has unknown type`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not contain %q", err, want)
		}
	}
}

// serveInfo serves the PluginInfo service of cfg on a unix socket and
// returns a client.
func serveInfo(t *testing.T, cfg ServeConfig) *InfoClient {
	t.Helper()
	dir, err := os.MkdirTemp("", "gp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	lis, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	norm, err := cfg.Schema.normalized()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Schema = norm
	srv := grpc.NewServer()
	info := newInfoServer(cfg, hclog.NewNullLogger())
	info.negotiated.Store(2)
	pluginv1.RegisterPluginInfoServer(srv, info)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return NewInfoClient(conn)
}

func TestInfoService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	var got map[string]any
	healthErr := errors.New("disk on fire")
	c := serveInfo(t, ServeConfig{
		Kind: KindStorage, Name: "disk", Version: "1.2.3",
		APIVersions: map[int]func(*grpc.Server){1: nil, 2: nil},
		Schema:      testSchema,
		Configure: func(_ context.Context, cfg map[string]any) error {
			if cfg["greeting"] == "no" {
				return errors.New("greeting must not be no")
			}
			got = cfg
			return nil
		},
		Health: func(context.Context) error { return healthErr },
	})

	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := Info{Kind: KindStorage, Name: "disk", Version: "1.2.3", APIVersions: []int{1, 2}, APIVersion: 2, Pid: os.Getpid()}
	if !reflect.DeepEqual(info, want) {
		t.Errorf("Info = %+v, want %+v", info, want)
	}

	s, err := c.Schema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := s.Attributes["secret"]; !a.Sensitive || a.Description != "a password" || a.Type != TypeString {
		t.Errorf("secret = %+v", a)
	}
	if !s.Blocks["endpoint"].Repeated {
		t.Errorf("endpoint block not repeated: %+v", s.Blocks)
	}

	// Sizes survive JSON exactly, defaults are applied by the plugin.
	if err := c.Configure(ctx, map[string]any{"greeting": "hi", "size": int64(1<<53 + 1)}); err != nil {
		t.Fatal(err)
	}
	if got["size"] != int64(1<<53+1) || got["timeout"] != "2s" {
		t.Errorf("plugin got %#v", got)
	}
	err = c.Configure(ctx, map[string]any{"greeting": "no"})
	if !errors.Is(err, ErrConfigRejected) || !strings.Contains(err.Error(), "greeting must not be no") {
		t.Errorf("rejected config: %v", err)
	}
	err = c.Configure(ctx, map[string]any{"greeting": true})
	if !errors.Is(err, ErrConfigRejected) || !strings.Contains(err.Error(), `attribute "greeting"`) {
		t.Errorf("ill-typed config: %v", err)
	}

	err = c.Health(ctx)
	if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("Health = %v", err)
	}
	healthErr = nil
	if err := c.Health(ctx); err != nil {
		t.Errorf("Health = %v", err)
	}
}
