// Package hclspec decodes a plugin's `config { ... }` HCL block against the
// plugin.Schema the plugin reports, as Nomad's plugins/shared/hclspec and
// HCL's hcldec do: the host validates the block before the plugin sees it,
// with every diagnostic at the offending attribute's file:line. It also
// names cty types (TypeName) and writes numbers (NumberText) for messages,
// which node config shares.
package hclspec

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/goray-dev/goray/sdk/plugin"
)

// Decode decodes a plugin's `config { ... }` body against the schema the
// plugin reported, into the values plugin.ServeConfig.Configure receives
// (which plugin.TypedConfig turns into the plugin's config struct). Unknown attributes and blocks (with a "did you mean"
// suggestion), missing required attributes, wrong types and malformed
// sizes and durations are diagnostics at their source range. A nil body (no
// config block) decodes as empty; a required attribute is then reported at
// missing, the plugin block's header.
func Decode(body hcl.Body, s plugin.Schema, missing hcl.Range) (map[string]any, hcl.Diagnostics) {
	if body == nil {
		body = hcl.EmptyBody()
	}
	return decodeBody(body, s, missing, "")
}

func decodeBody(body hcl.Body, s plugin.Schema, missing hcl.Range, prefix string) (map[string]any, hcl.Diagnostics) {
	hs := &hcl.BodySchema{}
	for _, name := range sortedKeys(s.Attributes) {
		hs.Attributes = append(hs.Attributes, hcl.AttributeSchema{Name: name, Required: s.Attributes[name].Required})
	}
	for _, name := range sortedKeys(s.Blocks) {
		hs.Blocks = append(hs.Blocks, hcl.BlockHeaderSchema{Type: name})
	}
	content, diags := body.Content(hs)
	for _, d := range diags {
		// An empty body (no config block) has no range of its own.
		if d.Subject == nil || d.Subject.Filename == "" {
			d.Subject = missing.Ptr()
			if d.Summary == "Missing required argument" {
				d.Detail += " The plugin block has no config block."
			}
		}
	}
	out := map[string]any{}
	if content == nil {
		return out, diags
	}
	for _, name := range sortedKeys(content.Attributes) {
		a := content.Attributes[name]
		v, ok, ds := decodeAttr(a, prefix+name, s.Attributes[name])
		diags = append(diags, ds...)
		if ok {
			out[name] = v
		}
	}
	byType := map[string][]*hcl.Block{}
	for _, b := range content.Blocks {
		byType[b.Type] = append(byType[b.Type], b)
	}
	for _, typ := range sortedKeys(byType) {
		bs := s.Blocks[typ]
		blocks := byType[typ]
		if !bs.Repeated && len(blocks) > 1 {
			for _, b := range blocks[1:] {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Duplicate block",
					Detail:   fmt.Sprintf("Only one %q block is allowed here; the first is at %s.", prefix+typ, blocks[0].DefRange),
					Subject:  b.DefRange.Ptr(),
				})
			}
			blocks = blocks[:1]
		}
		var list []any
		for _, b := range blocks {
			v, ds := decodeBody(b.Body, bs.Schema, b.DefRange, prefix+typ+".")
			diags = append(diags, ds...)
			list = append(list, v)
		}
		if bs.Repeated {
			out[typ] = list
		} else {
			out[typ] = list[0]
		}
	}
	return out, diags
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// decodeAttr evaluates a and converts it to the canonical form of attr's
// type. ok is false for an error or a null value ("not set").
func decodeAttr(a *hcl.Attribute, path string, attr plugin.Attribute) (any, bool, hcl.Diagnostics) {
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() {
		return nil, false, diags
	}
	rng := a.Expr.Range()
	diag := func(summary, detail string) hcl.Diagnostics {
		return append(diags, &hcl.Diagnostic{
			Severity:   hcl.DiagError,
			Summary:    summary,
			Detail:     detail,
			Subject:    rng.Ptr(),
			Context:    a.Range.Ptr(),
			Expression: a.Expr,
		})
	}
	typeErr := func(got cty.Value) hcl.Diagnostics {
		return diag("Incorrect attribute value type",
			fmt.Sprintf("Inappropriate value for attribute %q: %s is required, got %s.", path, attr.Type.Describe(), TypeName(got)))
	}
	if v.IsNull() {
		if attr.Required {
			return nil, false, diag("Missing required argument",
				fmt.Sprintf("The argument %q is required and cannot be null.", path))
		}
		return nil, false, diags
	}
	if !v.IsWhollyKnown() {
		return nil, false, diag("Unknown value", fmt.Sprintf("The value of %q must be known when the config is loaded.", path))
	}
	show := func(s string) string {
		if attr.Sensitive {
			return "(sensitive value)"
		}
		return fmt.Sprintf("%q", s)
	}
	switch attr.Type {
	case plugin.TypeString:
		if v.Type() != cty.String {
			return nil, false, typeErr(v)
		}
		return v.AsString(), true, diags
	case plugin.TypeBool:
		if v.Type() != cty.Bool {
			return nil, false, typeErr(v)
		}
		return v.True(), true, diags
	case plugin.TypeNumber:
		if v.Type() != cty.Number {
			return nil, false, typeErr(v)
		}
		f, _ := v.AsBigFloat().Float64()
		if math.IsInf(f, 0) {
			return nil, false, diag("Number out of range", fmt.Sprintf("The value of %q is too large.", path))
		}
		return f, true, diags
	case plugin.TypeListString:
		t := v.Type()
		if !t.IsTupleType() && !t.IsListType() && !t.IsSetType() {
			return nil, false, typeErr(v)
		}
		out := []any{}
		i := 0
		for it := v.ElementIterator(); it.Next(); i++ {
			_, ev := it.Element()
			if ev.IsNull() || ev.Type() != cty.String {
				return nil, false, diag("Incorrect attribute value type",
					fmt.Sprintf("Inappropriate value for element %d of attribute %q: a string is required, got %s.", i, path, TypeName(ev)))
			}
			out = append(out, ev.AsString())
		}
		return out, true, diags
	case plugin.TypeMapString:
		t := v.Type()
		if !t.IsObjectType() && !t.IsMapType() {
			return nil, false, typeErr(v)
		}
		out := map[string]any{}
		for it := v.ElementIterator(); it.Next(); {
			k, ev := it.Element()
			if ev.IsNull() || ev.Type() != cty.String {
				return nil, false, diag("Incorrect attribute value type",
					fmt.Sprintf("Inappropriate value for %s[%q]: a string is required, got %s.", path, k.AsString(), TypeName(ev)))
			}
			out[k.AsString()] = ev.AsString()
		}
		return out, true, diags
	case plugin.TypeDuration:
		if v.Type() != cty.String {
			return nil, false, typeErr(v)
		}
		s := strings.TrimSpace(v.AsString())
		if _, err := time.ParseDuration(s); err != nil {
			return nil, false, diag("Invalid duration",
				fmt.Sprintf("Invalid value for attribute %q: cannot parse %s as a duration. Use a Go duration string such as \"500ms\", \"30s\" or \"2m\".", path, show(v.AsString())))
		}
		return s, true, diags
	case plugin.TypeSize:
		switch v.Type() {
		case cty.String:
			n, err := plugin.ParseSize(v.AsString())
			if err != nil {
				detail := fmt.Sprintf("Invalid value for attribute %q: %s.", path, err)
				if attr.Sensitive {
					detail = fmt.Sprintf("Invalid value for attribute %q: not a number of bytes or a size such as \"512MiB\" or \"2GiB\".", path)
				}
				return nil, false, diag("Invalid size", detail)
			}
			return n, true, diags
		case cty.Number:
			bf := v.AsBigFloat()
			i, acc := bf.Int64()
			if !bf.IsInt() || acc != big.Exact || i < 0 {
				return nil, false, diag("Invalid size",
					fmt.Sprintf("Invalid value for attribute %q: %s is not a whole, non-negative number of bytes.", path, NumberText(bf)))
			}
			return i, true, diags
		}
		return nil, false, typeErr(v)
	}
	return nil, false, diag("Unsupported attribute type",
		fmt.Sprintf("The plugin declares attribute %q with type %q, which this host does not know.", path, string(attr.Type)))
}

// maxExactExp bounds the binary exponent of a number NumberText writes
// in full: past float64's range (2^1024), a diagnostic gives the magnitude.
const maxExactExp = 1100

// NumberText writes a config number for a diagnostic, at once whatever its
// size: in full (shortest decimal) within float64's range of magnitudes, else
// as "about" its value to six digits ("about 1e-100000"). A config number
// keeps the exponent it was written with, and big.Float.Text works out every
// decimal digit, which took seconds to minutes for `port = 1e-100000`.
func NumberText(bf *big.Float) string {
	e := bf.MantExp(nil)
	if bf.Sign() == 0 || bf.IsInf() || (e >= -maxExactExp && e <= maxExactExp) {
		return bf.Text('g', -1)
	}
	// bf = m * 2^e with 0.5 <= |m| < 1, and 2^e = 10^(e*log10(2)).
	m, _ := new(big.Float).SetMantExp(bf, -e).Float64()
	d := float64(e) * math.Log10(2)
	exp10 := math.Floor(d)
	m *= math.Pow(10, d-exp10) // 0.05 <= |m| < 10
	if math.Abs(m) < 1 {
		m *= 10
		exp10--
	}
	if m = math.Round(m*1e5) / 1e5; math.Abs(m) >= 10 {
		m /= 10
		exp10++
	}
	sign := "+"
	if exp10 < 0 {
		sign = ""
	}
	return "about " + strconv.FormatFloat(m, 'g', -1, 64) + "e" + sign + strconv.FormatFloat(exp10, 'f', 0, 64)
}

// TypeName describes v's type for messages ("string", "number", "null").
func TypeName(v cty.Value) string {
	if v.IsNull() {
		return "null"
	}
	return v.Type().FriendlyName()
}
