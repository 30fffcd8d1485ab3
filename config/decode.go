package config

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/sdk/plugin/hclspec"
)

// content decodes body against schema. Unknown arguments and blocks are
// reported by hcl itself, which suggests a close name ("Did you mean ...?");
// when hcl finds none, a case-insensitive match is suggested as well, so that
// `cpu = 2` points at "CPU".
func (d *decoder) content(body hcl.Body, schema *hcl.BodySchema) *hcl.BodyContent {
	c, diags := body.Content(schema)
	if sb, ok := body.(*hclsyntax.Body); ok {
		addCaseSuggestions(sb, schema, diags)
	}
	d.add(diags)
	if c == nil {
		c = &hcl.BodyContent{Attributes: hcl.Attributes{}}
	}
	return c
}

func addCaseSuggestions(sb *hclsyntax.Body, schema *hcl.BodySchema, diags hcl.Diagnostics) {
	for _, diag := range diags {
		if diag.Subject == nil || strings.Contains(diag.Detail, "Did you mean") {
			continue
		}
		var name string
		var options []string
		switch diag.Summary {
		case "Unsupported argument":
			for n, a := range sb.Attributes {
				if a.NameRange == *diag.Subject {
					name = n
				}
			}
			for _, as := range schema.Attributes {
				options = append(options, as.Name)
			}
		case "Unsupported block type":
			for _, b := range sb.Blocks {
				if b.TypeRange == *diag.Subject {
					name = b.Type
				}
			}
			for _, bs := range schema.Blocks {
				options = append(options, bs.Type)
			}
		}
		if name == "" {
			continue
		}
		for _, o := range options {
			if strings.EqualFold(o, name) {
				diag.Detail += fmt.Sprintf(" Did you mean %q?", o)
				break
			}
		}
	}
}

// value evaluates a's expression. It reports false for a nil attribute, an
// evaluation error (already recorded) or null, which means "not set".
func (d *decoder) value(a *hcl.Attribute) (cty.Value, bool) {
	if a == nil {
		return cty.NilVal, false
	}
	v, diags := a.Expr.Value(nil)
	d.add(diags)
	if diags.HasErrors() || v.IsNull() {
		return cty.NilVal, false
	}
	if !v.IsWhollyKnown() {
		d.diags = append(d.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unknown value",
			Detail:   fmt.Sprintf("The value of %q must be known when the config is loaded.", a.Name),
			Subject:  a.Expr.Range().Ptr(),
			Context:  a.Range.Ptr(),
		})
		return cty.NilVal, false
	}
	return v, true
}

func (d *decoder) typeErr(a *hcl.Attribute, rng hcl.Range, what, want string, got cty.Value) {
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity:   hcl.DiagError,
		Summary:    "Incorrect attribute value type",
		Detail:     fmt.Sprintf("Inappropriate value for %s: %s is required, got %s.", what, want, hclspec.TypeName(got)),
		Subject:    rng.Ptr(),
		Context:    a.Range.Ptr(),
		Expression: a.Expr,
	})
}

func (d *decoder) valueErr(a *hcl.Attribute, rng hcl.Range, summary, detail string) {
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity:   hcl.DiagError,
		Summary:    summary,
		Detail:     detail,
		Subject:    rng.Ptr(),
		Context:    a.Range.Ptr(),
		Expression: a.Expr,
	})
}

func attrName(a *hcl.Attribute) string { return fmt.Sprintf("attribute %q", a.Name) }

// str decodes a string attribute into dst and records its range under key.
func (d *decoder) str(a *hcl.Attribute, key string, dst *string) bool {
	v, ok := d.value(a)
	if !ok {
		return false
	}
	if v.Type() != cty.String {
		d.typeErr(a, a.Expr.Range(), attrName(a), "a string", v)
		return false
	}
	*dst = v.AsString()
	d.n.ranges[key] = a.Expr.Range()
	return true
}

// float decodes a number attribute.
func (d *decoder) float(a *hcl.Attribute, key string, dst *float64) bool {
	v, ok := d.value(a)
	if !ok {
		return false
	}
	f, ok := d.toFloat(a, a.Expr.Range(), attrName(a), v)
	if !ok {
		return false
	}
	*dst = f
	d.n.ranges[key] = a.Expr.Range()
	return true
}

func (d *decoder) toFloat(a *hcl.Attribute, rng hcl.Range, what string, v cty.Value) (float64, bool) {
	if v.Type() != cty.Number {
		d.typeErr(a, rng, what, "a number", v)
		return 0, false
	}
	f, _ := v.AsBigFloat().Float64()
	if math.IsInf(f, 0) {
		d.valueErr(a, rng, "Number out of range", fmt.Sprintf("The value of %s is too large.", what))
		return 0, false
	}
	return f, true
}

// boolVal decodes a true/false attribute.
func (d *decoder) boolVal(a *hcl.Attribute, key string, dst *bool) bool {
	v, ok := d.value(a)
	if !ok {
		return false
	}
	if v.Type() != cty.Bool {
		d.typeErr(a, a.Expr.Range(), attrName(a), "true or false", v)
		return false
	}
	*dst = v.True()
	d.n.ranges[key] = a.Expr.Range()
	return true
}

// intVal decodes a whole-number attribute.
func (d *decoder) intVal(a *hcl.Attribute, key string, dst *int) bool {
	v, ok := d.value(a)
	if !ok {
		return false
	}
	if v.Type() != cty.Number {
		d.typeErr(a, a.Expr.Range(), attrName(a), "a whole number", v)
		return false
	}
	bf := v.AsBigFloat()
	if !bf.IsInt() {
		d.valueErr(a, a.Expr.Range(), "Invalid value",
			fmt.Sprintf("The value of %s must be a whole number, got %s.", attrName(a), hclspec.NumberText(bf)))
		return false
	}
	i, acc := bf.Int64()
	if acc != big.Exact || int64(int(i)) != i {
		d.valueErr(a, a.Expr.Range(), "Number out of range",
			fmt.Sprintf("The value of %s is out of range: %s.", attrName(a), hclspec.NumberText(bf)))
		return false
	}
	*dst = int(i)
	d.n.ranges[key] = a.Expr.Range()
	return true
}

// size decodes a byte size: a string ParseSize accepts, or a whole number of
// bytes.
func (d *decoder) size(a *hcl.Attribute, key string, dst *int64) bool {
	v, ok := d.value(a)
	if !ok {
		return false
	}
	rng := a.Expr.Range()
	n, ok := d.toSize(a, rng, attrName(a), v)
	if !ok {
		return false
	}
	*dst = n
	d.n.ranges[key] = rng
	return true
}

// toSize converts v, the value of what (a or one of its entries, at rng),
// to a byte size.
func (d *decoder) toSize(a *hcl.Attribute, rng hcl.Range, what string, v cty.Value) (int64, bool) {
	switch v.Type() {
	case cty.String:
		n, err := ParseSize(v.AsString())
		if err != nil {
			d.valueErr(a, rng, "Invalid size",
				fmt.Sprintf("Invalid value for %s: %s.", what, err))
			return 0, false
		}
		return n, true
	case cty.Number:
		bf := v.AsBigFloat()
		i, acc := bf.Int64()
		if !bf.IsInt() || acc != big.Exact || i < 0 {
			d.valueErr(a, rng, "Invalid size",
				fmt.Sprintf("Invalid value for %s: %s is not a whole, non-negative number of bytes.", what, hclspec.NumberText(bf)))
			return 0, false
		}
		return i, true
	default:
		d.typeErr(a, rng, what, "a size (a string such as \"2GiB\" or a number of bytes)", v)
		return 0, false
	}
}

// duration decodes a Go duration string.
func (d *decoder) duration(a *hcl.Attribute, key string, dst *time.Duration) bool {
	v, ok := d.value(a)
	if !ok {
		return false
	}
	rng := a.Expr.Range()
	if v.Type() != cty.String {
		d.typeErr(a, rng, attrName(a), "a duration string such as \"30s\"", v)
		return false
	}
	s := v.AsString()
	dur, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		d.valueErr(a, rng, "Invalid duration",
			fmt.Sprintf("Invalid value for %s: cannot parse %q as a duration. Use a Go duration string such as \"500ms\", \"30s\" or \"2m\".", attrName(a), s))
		return false
	}
	*dst = dur
	d.n.ranges[key] = rng
	return true
}

// mapEntry is one element of a map-valued attribute with its source range.
type mapEntry struct {
	key string
	val cty.Value
	rng hcl.Range
}

// entries decodes a map or object attribute into its entries. When the
// expression is a literal `{ k = v }` each entry carries its own value's
// range; otherwise all entries carry the expression's range.
func (d *decoder) entries(a *hcl.Attribute, want string) ([]mapEntry, bool) {
	v, ok := d.value(a)
	if !ok {
		return nil, false
	}
	if !v.Type().IsObjectType() && !v.Type().IsMapType() {
		d.typeErr(a, a.Expr.Range(), attrName(a), want, v)
		return nil, false
	}
	pairs, pdiags := hcl.ExprMap(a.Expr)
	if pdiags.HasErrors() {
		var out []mapEntry
		for it := v.ElementIterator(); it.Next(); {
			k, ev := it.Element()
			out = append(out, mapEntry{key: k.AsString(), val: ev, rng: a.Expr.Range()})
		}
		return out, true
	}
	out := make([]mapEntry, 0, len(pairs))
	seen := map[string]hcl.Range{}
	good := true
	for _, p := range pairs {
		kv, kd := p.Key.Value(nil)
		d.add(kd)
		if kd.HasErrors() {
			good = false
			continue
		}
		ks, err := convert.Convert(kv, cty.String)
		if err != nil || ks.IsNull() {
			d.valueErr(a, p.Key.Range(), "Invalid key", fmt.Sprintf("Keys of %s must be strings.", attrName(a)))
			good = false
			continue
		}
		k := ks.AsString()
		if first, dup := seen[k]; dup {
			d.valueErr(a, p.Key.Range(), "Duplicate key",
				fmt.Sprintf("Key %q appears twice in %s; the first is at %s.", k, attrName(a), first))
			good = false
			continue
		}
		seen[k] = p.Key.Range()
		ev, vd := p.Value.Value(nil)
		d.add(vd)
		if vd.HasErrors() {
			good = false
			continue
		}
		out = append(out, mapEntry{key: k, val: ev, rng: p.Value.Range()})
	}
	return out, good
}

// stringMap decodes a map of strings such as labels.
func (d *decoder) stringMap(a *hcl.Attribute, key string) (map[string]string, bool) {
	es, ok := d.entries(a, "a map of strings")
	if !ok {
		return nil, false
	}
	m := make(map[string]string, len(es))
	for _, e := range es {
		if e.val.IsNull() || e.val.Type() != cty.String {
			d.typeErr(a, e.rng, fmt.Sprintf("%s[%q]", a.Name, e.key), "a string", e.val)
			ok = false
			continue
		}
		m[e.key] = e.val.AsString()
		d.n.ranges[entryKey(key, e.key)] = e.rng
	}
	if !ok {
		return nil, false
	}
	d.n.ranges[key] = a.Expr.Range()
	return m, true
}

// numberMap decodes a map of numbers such as custom resources.
func (d *decoder) numberMap(a *hcl.Attribute, key string) (map[string]float64, bool) {
	es, ok := d.entries(a, "a map of numbers")
	if !ok {
		return nil, false
	}
	m := make(map[string]float64, len(es))
	for _, e := range es {
		if e.val.IsNull() {
			d.typeErr(a, e.rng, fmt.Sprintf("%s[%q]", a.Name, e.key), "a number", e.val)
			ok = false
			continue
		}
		f, fok := d.toFloat(a, e.rng, fmt.Sprintf("%s[%q]", a.Name, e.key), e.val)
		if !fok {
			ok = false
			continue
		}
		m[e.key] = f
		d.n.ranges[entryKey(key, e.key)] = e.rng
	}
	if !ok {
		return nil, false
	}
	d.n.ranges[key] = a.Expr.Range()
	return m, true
}

// resourceMap decodes the resources of a node type: numbers by resource
// name, where memory (resources.Memory) is a size in bytes, given as a
// string such as "4GiB" or a number, as in the resources block.
func (d *decoder) resourceMap(a *hcl.Attribute, key string) (map[string]float64, bool) {
	es, ok := d.entries(a, "a map of numbers")
	if !ok {
		return nil, false
	}
	m := make(map[string]float64, len(es))
	for _, e := range es {
		what := fmt.Sprintf("%s[%q]", a.Name, e.key)
		if e.val.IsNull() {
			d.typeErr(a, e.rng, what, "a number", e.val)
			ok = false
			continue
		}
		var f float64
		var fok bool
		if e.key == resources.Memory {
			var sz int64
			sz, fok = d.toSize(a, e.rng, what, e.val)
			f = float64(sz)
		} else {
			f, fok = d.toFloat(a, e.rng, what, e.val)
		}
		if !fok {
			ok = false
			continue
		}
		m[e.key] = f
		d.n.ranges[entryKey(key, e.key)] = e.rng
	}
	if !ok {
		return nil, false
	}
	d.n.ranges[key] = a.Expr.Range()
	return m, true
}

// stringList decodes a list of strings such as setup_commands. Element i's
// range is recorded under entryKey(key, strconv.Itoa(i)).
func (d *decoder) stringList(a *hcl.Attribute, key string, dst *[]string) bool {
	v, ok := d.value(a)
	if !ok {
		return false
	}
	t := v.Type()
	if !t.IsListType() && !t.IsTupleType() && !t.IsSetType() {
		d.typeErr(a, a.Expr.Range(), attrName(a), "a list of strings", v)
		return false
	}
	// A literal [ ... ] gives each element its own range.
	exprs, ediags := hcl.ExprList(a.Expr)
	if ediags.HasErrors() || t.IsSetType() || len(exprs) != v.LengthInt() {
		exprs = nil
	}
	out := make([]string, 0, v.LengthInt())
	i := 0
	for it := v.ElementIterator(); it.Next(); i++ {
		_, ev := it.Element()
		rng := a.Expr.Range()
		if exprs != nil {
			rng = exprs[i].Range()
		}
		if ev.IsNull() || ev.Type() != cty.String {
			d.typeErr(a, rng, fmt.Sprintf("%s[%d]", a.Name, i), "a string", ev)
			ok = false
			continue
		}
		out = append(out, ev.AsString())
		d.n.ranges[entryKey(key, strconv.Itoa(i))] = rng
	}
	if !ok {
		return false
	}
	*dst = out
	d.n.ranges[key] = a.Expr.Range()
	return true
}
