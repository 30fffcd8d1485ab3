package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// A plugin's config block is declared once, as a Go struct; its Schema and
// its decoding are derived from the struct's tags, so the two cannot drift
// (as terraform-plugin-framework's typed models, or Nomad's hclspec):
//
//	type Config struct {
//		Bucket   string        `hcl:"bucket,required" doc:"Bucket the objects are stored in."`
//		PartSize int64         `hcl:"part_size,size" default:"16MiB" doc:"Size of the parts of multipart uploads."`
//		Timeout  time.Duration `hcl:"timeout" default:"30s" doc:"How long to wait for the endpoint."`
//		Secret   string        `hcl:"secret_key,sensitive" doc:"Secret access key."`
//	}
//
//	func (s *Store) ConfigSpec() plugin.ConfigSpec { return plugin.TypedConfig(s.Configure) }
//	func (s *Store) Configure(ctx context.Context, cfg Config) error { ... }
//
// Tags:
//
//   - hcl:"name[,option...]" names the attribute or block; a field without
//     an hcl tag (or with hcl:"-") is not part of the block. Options:
//     required (the attribute must be set; otherwise it is optional),
//     sensitive (its value is never echoed in messages), size (an integer
//     field holds a byte size: "2GiB" or a number of bytes).
//   - default:"value" is the attribute's default, written as in HCL without
//     quotes for strings ("30s", "16MiB", "true", "4"; a list or map as
//     JSON). It is validated with the schema.
//   - doc:"text" is the attribute's description (`goray plugins check`,
//     docs).
//
// Field types: string (TypeString), bool (TypeBool), any integer or float
// (TypeNumber; an integer field refuses fractions and values out of its
// range), an integer with the size option (TypeSize), time.Duration
// (TypeDuration), []string (TypeListString), map[string]string
// (TypeMapString), a struct or *struct (a nested block; a nil pointer when
// absent) and []struct (a repeated block).

// ConfigSpec is a plugin's config block: its Schema and what receives the
// decoded block. Make one with TypedConfig.
type ConfigSpec struct {
	schema    Schema
	configure func(ctx context.Context, cfg map[string]any) error
	err       error
}

// TypedConfig returns the ConfigSpec of the config struct T: its schema is
// derived from T's tags (see SchemaOf), and configure receives every block
// the host hands the plugin as a decoded, validated T (absent attributes
// take their defaults). A T whose tags are invalid gives a ConfigSpec whose
// Err says why; Serve refuses to start with it.
func TypedConfig[T any](configure func(ctx context.Context, cfg T) error) ConfigSpec {
	s, err := SchemaOf[T]()
	if err != nil {
		return ConfigSpec{err: err}
	}
	return ConfigSpec{schema: s, configure: func(ctx context.Context, raw map[string]any) error {
		v, err := decodeTyped[T](s, raw)
		if err != nil {
			return err
		}
		return configure(ctx, v)
	}}
}

// Schema returns the block's schema.
func (c ConfigSpec) Schema() Schema { return c.schema }

// Configure checks raw against the schema, decodes it and hands it to the
// plugin (see ServeConfig.Configure for raw's value types). The error wraps
// ErrInvalidConfig when raw does not fit the schema.
func (c ConfigSpec) Configure(ctx context.Context, raw map[string]any) error {
	if c.err != nil {
		return c.err
	}
	if c.configure == nil {
		return nil
	}
	return c.configure(ctx, raw)
}

// Err reports a config struct whose tags are invalid (wrapping
// ErrInvalidSchema), nil otherwise.
func (c ConfigSpec) Err() error { return c.err }

// SchemaOf derives the Schema of the config struct T from its tags (see
// TypedConfig). The error wraps ErrInvalidSchema and names the field.
func SchemaOf[T any]() (Schema, error) {
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Struct {
		return Schema{}, fmt.Errorf("%w: config type %s is not a struct", ErrInvalidSchema, t)
	}
	s, err := schemaOfStruct(t, "")
	if err != nil {
		return Schema{}, err
	}
	if err := s.Validate(); err != nil {
		return Schema{}, fmt.Errorf("config type %s: %w", t, err)
	}
	return s, nil
}

// DecodeConfig decodes raw, a config block's attributes as Go values (see
// ServeConfig.Configure; {"bucket": "b", "part_size": "8MiB"} works too),
// into a T: it checks raw against SchemaOf[T], fills in defaults and
// converts every value to its field's type. The error wraps
// ErrInvalidConfig (or ErrInvalidSchema for a bad T) and names the
// attribute. Embedders and tests use it to configure a plugin in-process.
func DecodeConfig[T any](raw map[string]any) (T, error) {
	s, err := SchemaOf[T]()
	if err != nil {
		var zero T
		return zero, err
	}
	return decodeTyped[T](s, raw)
}

func decodeTyped[T any](s Schema, raw map[string]any) (T, error) {
	var v T
	norm, err := NormalizeConfig(s, raw)
	if err != nil {
		return v, err
	}
	if err := decodeStruct(reflect.ValueOf(&v).Elem(), norm, ""); err != nil {
		return v, err
	}
	return v, nil
}

// field is one tagged field of a config struct.
type field struct {
	index    int
	name     string
	size     bool
	required bool
}

var durationType = reflect.TypeFor[time.Duration]()

// fields returns the tagged fields of struct type t.
func fields(t reflect.Type, prefix string) ([]field, error) {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("hcl")
		if !ok || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		fd := field{index: i, name: name}
		if name == "" {
			return nil, fmt.Errorf("%w: field %s%s: the hcl tag names no attribute", ErrInvalidSchema, prefix, f.Name)
		}
		if !f.IsExported() {
			return nil, fmt.Errorf("%w: field %s%s (attribute %q) is not exported", ErrInvalidSchema, prefix, f.Name, name)
		}
		for o := range strings.SplitSeq(opts, ",") {
			switch o {
			case "", "optional", "sensitive":
			case "required":
				fd.required = true
			case "size":
				fd.size = true
			default:
				return nil, fmt.Errorf("%w: attribute %q: unknown hcl tag option %q (want required, optional, sensitive or size)", ErrInvalidSchema, prefix+name, o)
			}
		}
		out = append(out, fd)
	}
	return out, nil
}

func schemaOfStruct(t reflect.Type, prefix string) (Schema, error) {
	fs, err := fields(t, prefix)
	if err != nil {
		return Schema{}, err
	}
	var s Schema
	for _, fd := range fs {
		f := t.Field(fd.index)
		path := prefix + fd.name
		if bt, repeated, ok := blockType(f.Type); ok {
			if fd.required || f.Tag.Get("default") != "" {
				return Schema{}, fmt.Errorf("%w: block %q cannot be required or have a default", ErrInvalidSchema, path)
			}
			bs, err := schemaOfStruct(bt, path+".")
			if err != nil {
				return Schema{}, err
			}
			if s.Blocks == nil {
				s.Blocks = map[string]BlockSchema{}
			}
			s.Blocks[fd.name] = BlockSchema{Schema: bs, Repeated: repeated}
			continue
		}
		at, err := attrTypeOf(f.Type, fd.size)
		if err != nil {
			return Schema{}, fmt.Errorf("%w: attribute %q (field %s): %v", ErrInvalidSchema, path, f.Name, err)
		}
		a := Attribute{
			Type:        at,
			Required:    fd.required,
			Optional:    !fd.required,
			Sensitive:   strings.Contains(","+f.Tag.Get("hcl")+",", ",sensitive,"),
			Description: f.Tag.Get("doc"),
		}
		if d, ok := f.Tag.Lookup("default"); ok {
			if a.Default, err = parseDefault(at, d); err != nil {
				return Schema{}, fmt.Errorf("%w: default of attribute %q: %v", ErrInvalidSchema, path, err)
			}
		}
		if s.Attributes == nil {
			s.Attributes = map[string]Attribute{}
		}
		s.Attributes[fd.name] = a
	}
	return s, nil
}

// blockType reports whether t is a block: a struct, *struct (once) or
// []struct (repeated); bt is the struct type.
func blockType(t reflect.Type) (bt reflect.Type, repeated, ok bool) {
	switch {
	case t.Kind() == reflect.Struct:
		return t, false, true
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		return t.Elem(), false, true
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		return t.Elem(), true, true
	}
	return nil, false, false
}

func attrTypeOf(t reflect.Type, size bool) (AttrType, error) {
	isInt := false
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		isInt = true
	}
	if size {
		if !isInt || t == durationType {
			return "", fmt.Errorf("the size option needs an integer field, not %s", t)
		}
		return TypeSize, nil
	}
	switch {
	case t == durationType:
		return TypeDuration, nil
	case t.Kind() == reflect.String:
		return TypeString, nil
	case t.Kind() == reflect.Bool:
		return TypeBool, nil
	case isInt, t.Kind() == reflect.Float32, t.Kind() == reflect.Float64:
		return TypeNumber, nil
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return TypeListString, nil
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.String:
		return TypeMapString, nil
	}
	return "", fmt.Errorf("unsupported field type %s", t)
}

// parseDefault turns a default tag into a value of type t; Schema.Validate
// then checks it as any default.
func parseDefault(t AttrType, d string) (any, error) {
	switch t {
	case TypeString, TypeDuration, TypeSize:
		return d, nil
	case TypeBool:
		return strconv.ParseBool(d)
	case TypeNumber:
		return strconv.ParseFloat(d, 64)
	case TypeListString:
		var l []string
		if err := json.Unmarshal([]byte(d), &l); err != nil {
			return nil, fmt.Errorf("want a JSON list of strings: %v", err)
		}
		return l, nil
	case TypeMapString:
		var m map[string]string
		if err := json.Unmarshal([]byte(d), &m); err != nil {
			return nil, fmt.Errorf("want a JSON object of strings: %v", err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("unknown type %q", string(t))
}

// decodeStruct sets the tagged fields of dst (a struct) from norm, a body
// in NormalizeConfig's canonical form.
func decodeStruct(dst reflect.Value, norm map[string]any, prefix string) error {
	fs, err := fields(dst.Type(), prefix)
	if err != nil {
		return err
	}
	for _, fd := range fs {
		raw, ok := norm[fd.name]
		if !ok {
			continue
		}
		f := dst.Field(fd.index)
		path := prefix + fd.name
		if bt, repeated, ok := blockType(f.Type()); ok {
			if err := decodeBlock(f, bt, repeated, raw, path); err != nil {
				return err
			}
			continue
		}
		if err := setValue(f, raw, fd.size); err != nil {
			return fmt.Errorf("%w: attribute %q: %v", ErrInvalidConfig, path, err)
		}
	}
	return nil
}

func decodeBlock(f reflect.Value, bt reflect.Type, repeated bool, raw any, path string) error {
	if repeated {
		list, _ := raw.([]any)
		sl := reflect.MakeSlice(f.Type(), len(list), len(list))
		for i, e := range list {
			m, _ := e.(map[string]any)
			if err := decodeStruct(sl.Index(i), m, fmt.Sprintf("%s[%d].", path, i)); err != nil {
				return err
			}
		}
		f.Set(sl)
		return nil
	}
	m, _ := raw.(map[string]any)
	if f.Kind() == reflect.Pointer {
		p := reflect.New(bt)
		if err := decodeStruct(p.Elem(), m, path+"."); err != nil {
			return err
		}
		f.Set(p)
		return nil
	}
	return decodeStruct(f, m, path+".")
}

// setValue stores v, a canonical value (see NormalizeConfig), in f.
func setValue(f reflect.Value, v any, size bool) error {
	switch {
	case f.Type() == durationType:
		s, _ := v.(string)
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		f.SetInt(int64(d))
		return nil
	case size:
		n, _ := v.(int64)
		return setInt(f, float64(n), n)
	}
	switch f.Kind() {
	case reflect.String:
		s, _ := v.(string)
		f.SetString(s)
	case reflect.Bool:
		b, _ := v.(bool)
		f.SetBool(b)
	case reflect.Float32, reflect.Float64:
		n, _ := v.(float64)
		if f.OverflowFloat(n) {
			return fmt.Errorf("%v is out of range", n)
		}
		f.SetFloat(n)
	case reflect.Slice:
		l, _ := v.([]any)
		out := reflect.MakeSlice(f.Type(), len(l), len(l))
		for i, e := range l {
			s, _ := e.(string)
			out.Index(i).SetString(s)
		}
		f.Set(out)
	case reflect.Map:
		m, _ := v.(map[string]any)
		out := reflect.MakeMapWithSize(f.Type(), len(m))
		for k, e := range m {
			s, _ := e.(string)
			out.SetMapIndex(reflect.ValueOf(k).Convert(f.Type().Key()), reflect.ValueOf(s).Convert(f.Type().Elem()))
		}
		f.Set(out)
	default: // integers
		n, _ := v.(float64)
		if n != math.Trunc(n) {
			return fmt.Errorf("want a whole number, got %v", n)
		}
		if n < math.MinInt64 || n >= math.MaxInt64 {
			return fmt.Errorf("%v is out of range", n)
		}
		return setInt(f, n, int64(n))
	}
	return nil
}

// setInt stores n (whose float64 form is fn, for messages) in the integer
// field f, refusing values out of f's range.
func setInt(f reflect.Value, fn float64, n int64) error {
	switch f.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n < 0 || f.OverflowUint(uint64(n)) {
			return fmt.Errorf("%v is out of range", fn)
		}
		f.SetUint(uint64(n))
	default:
		if f.OverflowInt(n) {
			return fmt.Errorf("%v is out of range", fn)
		}
		f.SetInt(n)
	}
	return nil
}
