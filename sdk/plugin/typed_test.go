package plugin

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

type endpoint struct {
	Address string `hcl:"address,required" doc:"host:port"`
}

type limits struct {
	Max int `hcl:"max" default:"8"`
}

// typedConfig has a field of every supported type.
type typedConfig struct {
	Bucket    string            `hcl:"bucket,required" doc:"Bucket the objects are stored in."`
	Secret    string            `hcl:"secret,sensitive"`
	PartSize  int64             `hcl:"part_size,size" default:"16MiB"`
	Timeout   time.Duration     `hcl:"timeout" default:"30s"`
	Streams   int               `hcl:"streams" default:"4"`
	Ratio     float64           `hcl:"ratio"`
	TLS       bool              `hcl:"tls" default:"true"`
	Tags      []string          `hcl:"tags" default:"[\"a\"]"`
	Labels    map[string]string `hcl:"labels"`
	Limits    *limits           `hcl:"limits"`
	Endpoints []endpoint        `hcl:"endpoint"`
	internal  int               // no tag: not part of the block
	Skipped   string            `hcl:"-"`
}

func TestSchemaOf(t *testing.T) {
	s, err := SchemaOf[typedConfig]()
	if err != nil {
		t.Fatal(err)
	}
	want := Schema{
		Attributes: map[string]Attribute{
			"bucket":    {Type: TypeString, Required: true, Description: "Bucket the objects are stored in."},
			"secret":    {Type: TypeString, Optional: true, Sensitive: true},
			"part_size": {Type: TypeSize, Optional: true, Default: "16MiB"},
			"timeout":   {Type: TypeDuration, Optional: true, Default: "30s"},
			"streams":   {Type: TypeNumber, Optional: true, Default: float64(4)},
			"ratio":     {Type: TypeNumber, Optional: true},
			"tls":       {Type: TypeBool, Optional: true, Default: true},
			"tags":      {Type: TypeListString, Optional: true, Default: []string{"a"}},
			"labels":    {Type: TypeMapString, Optional: true},
		},
		Blocks: map[string]BlockSchema{
			"limits": {Schema: Schema{Attributes: map[string]Attribute{"max": {Type: TypeNumber, Optional: true, Default: float64(8)}}}},
			"endpoint": {Repeated: true, Schema: Schema{Attributes: map[string]Attribute{
				"address": {Type: TypeString, Required: true, Description: "host:port"}}}},
		},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("SchemaOf:\n got %#v\nwant %#v", s, want)
	}
}

func TestSchemaOfErrors(t *testing.T) {
	type badType struct {
		C chan int `hcl:"c"`
	}
	type badDefault struct {
		S int64 `hcl:"s,size" default:"lots"`
	}
	type badOption struct {
		S string `hcl:"s,mandatory"`
	}
	type requiredDefault struct {
		S string `hcl:"s,required" default:"x"`
	}
	type sizeOnString struct {
		S string `hcl:"s,size"`
	}
	type noName struct {
		S string `hcl:",required"`
	}
	tests := []struct {
		name string
		fn   func() (Schema, error)
		want string
	}{
		{"unsupported type", SchemaOf[badType], `attribute "c" (field C): unsupported field type chan int`},
		{"bad default", SchemaOf[badDefault], `default of attribute "s"`},
		{"unknown option", SchemaOf[badOption], `attribute "s": unknown hcl tag option "mandatory"`},
		{"required with default", SchemaOf[requiredDefault], `attribute "s" is required and has a default`},
		{"size on a string", SchemaOf[sizeOnString], `the size option needs an integer field`},
		{"no name", SchemaOf[noName], `field S: the hcl tag names no attribute`},
		{"not a struct", SchemaOf[int], `config type int is not a struct`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.fn()
			if !errors.Is(err, ErrInvalidSchema) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrInvalidSchema saying %q", err, tc.want)
			}
		})
	}
}

func TestDecodeConfig(t *testing.T) {
	got, err := DecodeConfig[typedConfig](map[string]any{
		"bucket":    "b",
		"part_size": "8MiB",
		"ratio":     0.5,
		"labels":    map[string]any{"k": "v"},
		"limits":    map[string]any{},
		"endpoint":  []any{map[string]any{"address": "a:1"}, map[string]any{"address": "b:2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := typedConfig{
		Bucket: "b", PartSize: 8 << 20, Timeout: 30 * time.Second, Streams: 4, Ratio: 0.5, TLS: true,
		Tags: []string{"a"}, Labels: map[string]string{"k": "v"}, Limits: &limits{Max: 8},
		Endpoints: []endpoint{{Address: "a:1"}, {Address: "b:2"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	// An absent block stays nil.
	got, err = DecodeConfig[typedConfig](map[string]any{"bucket": "b"})
	if err != nil || got.Limits != nil || got.Endpoints != nil {
		t.Errorf("absent blocks: %+v, %v", got, err)
	}
}

func TestDecodeConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		raw  map[string]any
		want string
	}{
		{"required missing", map[string]any{}, `the attribute "bucket" is required`},
		{"wrong type", map[string]any{"bucket": "b", "tls": "yes"}, `attribute "tls": a bool is required, got string`},
		{"bad size", map[string]any{"bucket": "b", "part_size": "lots"}, `attribute "part_size": invalid size "lots"`},
		{"bad duration", map[string]any{"bucket": "b", "timeout": "soon"}, `attribute "timeout": cannot parse "soon" as a duration`},
		{"fraction in an int", map[string]any{"bucket": "b", "streams": 1.5}, `attribute "streams": want a whole number, got 1.5`},
		{"int out of range", map[string]any{"bucket": "b", "limits": map[string]any{"max": 1e300}}, `attribute "limits.max": 1e+300 is out of range`},
		{"unknown attribute", map[string]any{"bucket": "b", "bukket": "c"}, `unknown attribute or block "bukket"`},
		{"nested required", map[string]any{"bucket": "b", "endpoint": []any{map[string]any{}}}, `the attribute "endpoint[0].address" is required`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeConfig[typedConfig](tc.raw)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrInvalidConfig saying %q", err, tc.want)
			}
		})
	}
}

func TestTypedConfig(t *testing.T) {
	var got typedConfig
	spec := TypedConfig(func(_ context.Context, c typedConfig) error {
		got = c
		if c.Bucket == "refused" {
			return errors.New("bucket: refused")
		}
		return nil
	})
	if spec.Err() != nil {
		t.Fatal(spec.Err())
	}
	if _, ok := spec.Schema().Attributes["part_size"]; !ok {
		t.Fatal("schema lacks part_size")
	}
	if err := spec.Configure(context.Background(), map[string]any{"bucket": "b", "part_size": int64(1 << 20)}); err != nil {
		t.Fatal(err)
	}
	if got.Bucket != "b" || got.PartSize != 1<<20 || got.Timeout != 30*time.Second {
		t.Errorf("configured with %+v", got)
	}
	if err := spec.Configure(context.Background(), map[string]any{"bucket": "refused"}); err == nil || err.Error() != "bucket: refused" {
		t.Errorf("the plugin's error: %v", err)
	}
	type bad struct {
		C chan int `hcl:"c"`
	}
	badSpec := TypedConfig(func(context.Context, bad) error { return nil })
	if !errors.Is(badSpec.Err(), ErrInvalidSchema) || !errors.Is(badSpec.Configure(context.Background(), nil), ErrInvalidSchema) {
		t.Errorf("a bad struct: Err %v", badSpec.Err())
	}
}
