// Package resources implements resource sets with fractional amounts.
//
// Amounts are stored in fixed point (1/10000 of a unit), as Ray does, so that
// adding and subtracting fractions such as 0.1 never drifts.
package resources

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Unit is the fixed-point scale: an amount of 1.0 is stored as Unit.
const Unit = 10000

// Well-known resource names.
const (
	CPU               = "CPU"
	GPU               = "GPU"
	Memory            = "memory"
	ObjectStoreMemory = "object_store_memory"
)

// Set maps resource names to fixed-point amounts. The zero value is an empty
// set. Entries with amount zero are dropped.
type Set map[string]int64

// Bounds on resource sets. Amounts are int64 in units of 1/Unit, so an
// amount above math.MaxInt64/Unit (about 9.2e14: 9.2e14 CPUs, or 838 TiB
// of memory, which is counted in bytes) cannot be represented at all, and
// float64 to int64 conversion of such a value yields garbage (on amd64 the
// most negative int64, which then "fits" every request). MaxAmount stays
// well below that so that the amounts of a few nodes can still be added
// up.
const (
	// MaxAmount is the largest amount of one resource, in whole units
	// (bytes for memory): 10^14, about 91 TiB of memory.
	MaxAmount = 1e14
	// MaxFixed is MaxAmount in fixed point.
	MaxFixed int64 = MaxAmount * Unit
	// MaxCount is the largest amount of CPU or GPU (logical, so
	// oversubscribing is allowed) on one node or in one request: 65536.
	// No machine comes close; a node announcing more is broken or fake.
	MaxCount = 1 << 16
	// MaxNameLen is the longest resource name, in bytes.
	MaxNameLen = 256
	// MaxResources is how many resources one set (a node's total, a
	// request) may name.
	MaxResources = 256
)

// MaxFor returns the largest amount of the named resource: MaxCount for
// CPU and GPU, MaxAmount for the others.
func MaxFor(name string) float64 {
	if name == CPU || name == GPU {
		return MaxCount
	}
	return MaxAmount
}

// FromFloat converts a float amount to fixed point, rounding to the nearest
// unit fraction. It returns an error for negative, NaN or infinite amounts
// and amounts above MaxFor(name).
func FromFloat(name string, v float64) (int64, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("resource %q: amount must be a finite number >= 0, got %v", name, v)
	}
	if m := MaxFor(name); v > m {
		return 0, fmt.Errorf("resource %q: amount %v is above the maximum %g", name, v, m)
	}
	return int64(math.Round(v * Unit)), nil
}

// CheckName checks a resource name: not empty, at most MaxNameLen bytes of
// UTF-8 without control characters.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("resource name is empty")
	case len(name) > MaxNameLen:
		return fmt.Errorf("resource name %q... is %d bytes long, more than %d", name[:32], len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("resource name %q is not valid UTF-8", name)
	case strings.ContainsFunc(name, unicode.IsControl):
		return fmt.Errorf("resource name %q contains a control character", name)
	}
	return nil
}

// CheckFixed checks a fixed-point amount received from elsewhere (a node's
// registration, a request): a valid name and 0 <= v <= MaxFor(name) in
// fixed point.
func CheckFixed(name string, v int64) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if m := MaxFor(name); v < 0 || v > int64(m)*Unit {
		return fmt.Errorf("resource %q: amount %s is outside 0 to %g", name, FormatAmount(name, v), m)
	}
	return nil
}

// FromFloats builds a Set from float amounts.
func FromFloats(m map[string]float64) (Set, error) {
	s := Set{}
	for k, v := range m {
		a, err := FromFloat(k, v)
		if err != nil {
			return nil, err
		}
		if a != 0 {
			s[k] = a
		}
	}
	return s, nil
}

// Floats returns the set as float amounts.
func (s Set) Floats() map[string]float64 {
	m := make(map[string]float64, len(s))
	for k, v := range s {
		m[k] = float64(v) / Unit
	}
	return m
}

// Get returns the float amount of name.
func (s Set) Get(name string) float64 { return float64(s[name]) / Unit }

// Clone returns a copy.
func (s Set) Clone() Set {
	c := make(Set, len(s))
	for k, v := range s {
		c[k] = v
	}
	return c
}

// Fits reports whether every amount in req is available in s.
func (s Set) Fits(req Set) bool {
	for k, v := range req {
		if v > 0 && s[k] < v {
			return false
		}
	}
	return true
}

// Add adds other to s in place.
func (s Set) Add(other Set) {
	for k, v := range other {
		s[k] += v
		if s[k] == 0 {
			delete(s, k)
		}
	}
}

// Sub subtracts other from s in place. Callers check Fits first.
func (s Set) Sub(other Set) {
	for k, v := range other {
		s[k] -= v
		if s[k] == 0 {
			delete(s, k)
		}
	}
}

// Missing returns the names in req that s can never provide (not present or
// too small), sorted; used to explain infeasible requests.
func (s Set) Missing(req Set) []string {
	var out []string
	for k, v := range req {
		if v > 0 && s[k] < v {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// Key returns a canonical string for the set, usable as a map key
// (scheduling class).
func (s Set) Key() string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d;", k, s[k])
	}
	return b.String()
}

// String formats the set as "CPU: 1, GPU: 0.5".
func (s Set) String() string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %s", k, FormatAmount(k, s[k])))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// FormatAmount prints a fixed-point amount; byte-valued resources (memory,
// object_store_memory) print as bytes.
func FormatAmount(name string, v int64) string {
	f := float64(v) / Unit
	if f == math.Trunc(f) {
		return fmt.Sprintf("%d", int64(f))
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4f", f), "0"), ".")
}
