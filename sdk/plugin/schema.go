package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Schema describes a plugin's config block (the `config { ... }` body): its
// attributes and nested blocks by name.
type Schema struct {
	Attributes map[string]Attribute   `json:"attributes,omitempty"`
	Blocks     map[string]BlockSchema `json:"blocks,omitempty"`
}

// Attribute describes one `name = value` argument of a config block.
type Attribute struct {
	// Type is the value's type.
	Type AttrType `json:"type"`
	// Required attributes must be set.
	Required bool `json:"required,omitempty"`
	// Optional documents that the attribute may be left out (the default
	// for attributes that are not Required).
	Optional bool `json:"optional,omitempty"`
	// Sensitive values are never logged or echoed in messages.
	Sensitive bool `json:"sensitive,omitempty"`
	// Description is shown by `goray plugins check`.
	Description string `json:"description,omitempty"`
	// Default is used when the attribute is absent: a value of the
	// attribute's type (a time.Duration or string for durations; an integer
	// or a string such as "64MiB" for sizes).
	Default any `json:"default,omitempty"`
}

// AttrType is the type of an Attribute.
type AttrType string

// Attribute types. Durations are Go duration strings ("30s"); sizes are a
// whole number of bytes or a string with a unit ("2GiB", "512MB").
const (
	TypeString     AttrType = "string"
	TypeNumber     AttrType = "number"
	TypeBool       AttrType = "bool"
	TypeListString AttrType = "list(string)"
	TypeMapString  AttrType = "map(string)"
	TypeDuration   AttrType = "duration"
	TypeSize       AttrType = "size"
)

// AttrTypes lists every attribute type.
var AttrTypes = []AttrType{TypeString, TypeNumber, TypeBool, TypeListString, TypeMapString, TypeDuration, TypeSize}

// Describe says in words what a value of t looks like, for messages.
func (t AttrType) Describe() string {
	switch t {
	case TypeString:
		return "a string"
	case TypeNumber:
		return "a number"
	case TypeBool:
		return "a bool"
	case TypeListString:
		return "a list of strings"
	case TypeMapString:
		return "a map of strings"
	case TypeDuration:
		return `a duration string such as "30s"`
	case TypeSize:
		return `a size (a string such as "2GiB" or a number of bytes)`
	}
	return fmt.Sprintf("an unknown type %q", string(t))
}

// BlockSchema describes a nested block of a config body.
type BlockSchema struct {
	Schema Schema `json:"schema"`
	// Repeated blocks may appear any number of times; others at most once.
	Repeated bool `json:"repeated,omitempty"`
}

// ErrInvalidSchema is wrapped by the errors Schema.Validate returns.
var ErrInvalidSchema = errors.New("invalid config schema")

// ErrInvalidConfig is wrapped by the errors NormalizeConfig returns.
var ErrInvalidConfig = errors.New("invalid plugin config")

// Validate checks that every attribute has a known type and a default of
// that type, that no attribute is both required and defaulted, and that no
// name is both an attribute and a block. The error wraps ErrInvalidSchema
// and names every problem by its path.
func (s Schema) Validate() error {
	var errs []string
	s.validate("", &errs)
	if len(errs) == 0 {
		return nil
	}
	slices.Sort(errs)
	return fmt.Errorf("%w: %s", ErrInvalidSchema, strings.Join(errs, "; "))
}

func (s Schema) validate(prefix string, errs *[]string) {
	for name, a := range s.Attributes {
		path := prefix + name
		if name == "" {
			*errs = append(*errs, fmt.Sprintf("attribute %q has an empty name", path))
		}
		if !slices.Contains(AttrTypes, a.Type) {
			*errs = append(*errs, fmt.Sprintf("attribute %q has unknown type %q (want one of %s)", path, a.Type, typeList()))
			continue
		}
		if a.Default != nil {
			if a.Required {
				*errs = append(*errs, fmt.Sprintf("attribute %q is required and has a default", path))
			}
			if _, err := normalizeValue(a.Type, a.Default); err != nil {
				*errs = append(*errs, fmt.Sprintf("default of attribute %q: %v", path, err))
			}
		}
		if _, dup := s.Blocks[name]; dup {
			*errs = append(*errs, fmt.Sprintf("%q is both an attribute and a block", path))
		}
	}
	for name, b := range s.Blocks {
		if name == "" {
			*errs = append(*errs, fmt.Sprintf("block %q has an empty name", prefix+name))
		}
		b.Schema.validate(prefix+name+".", errs)
	}
}

func typeList() string {
	names := make([]string, len(AttrTypes))
	for i, t := range AttrTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// normalized returns a copy of s whose defaults have their canonical form
// (see NormalizeConfig).
func (s Schema) normalized() (Schema, error) {
	if err := s.Validate(); err != nil {
		return Schema{}, err
	}
	out := Schema{}
	if s.Attributes != nil {
		out.Attributes = make(map[string]Attribute, len(s.Attributes))
		for name, a := range s.Attributes {
			if a.Default != nil {
				a.Default, _ = normalizeValue(a.Type, a.Default)
			}
			out.Attributes[name] = a
		}
	}
	if s.Blocks != nil {
		out.Blocks = make(map[string]BlockSchema, len(s.Blocks))
		for name, b := range s.Blocks {
			ns, err := b.Schema.normalized()
			if err != nil {
				return Schema{}, err
			}
			out.Blocks[name] = BlockSchema{Schema: ns, Repeated: b.Repeated}
		}
	}
	return out, nil
}

// NormalizeConfig checks cfg against s and returns it in canonical form:
// strings, float64 numbers, bools, []any of strings, map[string]any of
// strings, durations as Go duration strings, sizes as int64 bytes, a nested
// block as map[string]any and a repeated block as []any of map[string]any.
// Absent attributes take their Default. Numbers may arrive as any Go number
// or json.Number. The error wraps ErrInvalidConfig and names the attribute.
func NormalizeConfig(s Schema, cfg map[string]any) (map[string]any, error) {
	return normalizeBody(s, cfg, "")
}

func normalizeBody(s Schema, cfg map[string]any, prefix string) (map[string]any, error) {
	out := make(map[string]any, len(cfg))
	for name, v := range cfg {
		path := prefix + name
		if a, ok := s.Attributes[name]; ok {
			if v == nil {
				continue
			}
			nv, err := normalizeValue(a.Type, v)
			if err != nil {
				return nil, fmt.Errorf("%w: attribute %q: %v", ErrInvalidConfig, path, err)
			}
			out[name] = nv
			continue
		}
		b, ok := s.Blocks[name]
		if !ok {
			return nil, fmt.Errorf("%w: unknown attribute or block %q", ErrInvalidConfig, path)
		}
		if v == nil {
			continue
		}
		if !b.Repeated {
			m, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%w: block %q: want an object, got %T", ErrInvalidConfig, path, v)
			}
			nb, err := normalizeBody(b.Schema, m, path+".")
			if err != nil {
				return nil, err
			}
			out[name] = nb
			continue
		}
		list, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%w: repeated block %q: want a list of objects, got %T", ErrInvalidConfig, path, v)
		}
		nl := make([]any, len(list))
		for i, e := range list {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%w: block %s[%d]: want an object, got %T", ErrInvalidConfig, path, i, e)
			}
			nb, err := normalizeBody(b.Schema, m, fmt.Sprintf("%s[%d].", path, i))
			if err != nil {
				return nil, err
			}
			nl[i] = nb
		}
		out[name] = nl
	}
	for name, a := range s.Attributes {
		if _, ok := out[name]; ok {
			continue
		}
		switch {
		case a.Default != nil:
			nv, err := normalizeValue(a.Type, a.Default)
			if err != nil {
				return nil, fmt.Errorf("%w: default of attribute %q: %v", ErrInvalidSchema, prefix+name, err)
			}
			out[name] = nv
		case a.Required:
			return nil, fmt.Errorf("%w: the attribute %q is required", ErrInvalidConfig, prefix+name)
		}
	}
	return out, nil
}

// normalizeValue converts v to the canonical form of t.
func normalizeValue(t AttrType, v any) (any, error) {
	bad := func() error { return fmt.Errorf("%s is required, got %T", t.Describe(), v) }
	switch t {
	case TypeString:
		if s, ok := v.(string); ok {
			return s, nil
		}
		return nil, bad()
	case TypeBool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
		return nil, bad()
	case TypeNumber:
		f, ok := toFloat(v)
		if !ok {
			return nil, bad()
		}
		return f, nil
	case TypeListString:
		switch l := v.(type) {
		case []string:
			out := make([]any, len(l))
			for i, s := range l {
				out[i] = s
			}
			return out, nil
		case []any:
			out := make([]any, len(l))
			for i, e := range l {
				s, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("element %d: a string is required, got %T", i, e)
				}
				out[i] = s
			}
			return out, nil
		}
		return nil, bad()
	case TypeMapString:
		switch m := v.(type) {
		case map[string]string:
			out := make(map[string]any, len(m))
			for k, s := range m {
				out[k] = s
			}
			return out, nil
		case map[string]any:
			out := make(map[string]any, len(m))
			for k, e := range m {
				s, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("key %q: a string is required, got %T", k, e)
				}
				out[k] = s
			}
			return out, nil
		}
		return nil, bad()
	case TypeDuration:
		switch d := v.(type) {
		case time.Duration:
			return d.String(), nil
		case string:
			s := strings.TrimSpace(d)
			if _, err := time.ParseDuration(s); err != nil {
				return nil, fmt.Errorf("cannot parse %q as a duration; use a Go duration string such as \"500ms\", \"30s\" or \"2m\"", d)
			}
			return s, nil
		}
		return nil, bad()
	case TypeSize:
		if s, ok := v.(string); ok {
			return ParseSize(s)
		}
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				v = i
			} else if f, err := n.Float64(); err == nil {
				v = f
			}
		}
		switch n := v.(type) {
		case int:
			v = int64(n)
		case int32:
			v = int64(n)
		case uint32:
			v = int64(n)
		case uint64:
			if n > math.MaxInt64 {
				return nil, fmt.Errorf("size %d is too large", n)
			}
			v = int64(n)
		case float64:
			if n != math.Trunc(n) || n < 0 || n >= math.MaxInt64 {
				return nil, fmt.Errorf("%v is not a whole, non-negative number of bytes", n)
			}
			v = int64(n)
		}
		if i, ok := v.(int64); ok {
			if i < 0 {
				return nil, fmt.Errorf("%d is not a whole, non-negative number of bytes", i)
			}
			return i, nil
		}
		return nil, bad()
	}
	return nil, fmt.Errorf("unknown type %q", string(t))
}

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint32:
		return float64(n), true
	case uint64:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}
