package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// amounts is a resource set that marshals to JSON as float amounts
// ({"CPU": 2, "memory": 1073741824}) instead of fixed-point units.
type amounts resources.Set

// MarshalJSON writes the float amounts; a nil set is {}.
func (a amounts) MarshalJSON() ([]byte, error) {
	return json.Marshal(resources.Set(a).Floats())
}

func amountsOf(r *pb.Resources) amounts {
	if r == nil {
		return amounts{}
	}
	return amounts(maps.Clone(resources.Set(r.GetAmounts())))
}

// byteResources are the resources whose amounts are bytes.
var byteResources = []string{resources.Memory, resources.ObjectStoreMemory}

// wellKnown are the resources shown first, in this order, even when zero.
var wellKnown = []string{resources.CPU, resources.GPU, resources.Memory, resources.ObjectStoreMemory}

// formatAmount formats a fixed-point amount; byte-valued resources print
// with IEC units.
func formatAmount(name string, v int64) string {
	if slices.Contains(byteResources, name) {
		if v < 0 {
			return "-" + humanize.IBytes(uint64(-v/resources.Unit))
		}
		return humanize.IBytes(uint64(v / resources.Unit))
	}
	return resources.FormatAmount(name, v)
}

// formatSet formats a set as "CPU: 1, GPU: 0.5" with byte sizes, or "-".
func formatSet(s amounts) string {
	if len(s) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(s))
	for _, k := range resourceNames(s) {
		parts = append(parts, k+": "+formatAmount(k, s[k]))
	}
	return strings.Join(parts, ", ")
}

// resourceNames returns the names of sets: well-known names first, then the
// rest sorted.
func resourceNames(sets ...amounts) []string {
	seen := map[string]bool{}
	for _, s := range sets {
		for k := range s {
			seen[k] = true
		}
	}
	var out []string
	for _, k := range wellKnown {
		if seen[k] {
			out = append(out, k)
			delete(seen, k)
		}
	}
	return append(out, slices.Sorted(maps.Keys(seen))...)
}

// customNames returns the names in sets that are not well known, sorted.
func customNames(sets ...amounts) []string {
	var out []string
	for _, k := range resourceNames(sets...) {
		if !slices.Contains(wellKnown, k) {
			out = append(out, k)
		}
	}
	return out
}

// hexID is the full hex form of an id, or "" for none.
func hexID(b []byte) string { return hex.EncodeToString(b) }

// shortID is the first 8 hex digits of an id (as ids.ID.Short), or "-".
func shortID(b []byte) string {
	if len(b) == 0 {
		return "-"
	}
	if len(b) > 4 {
		b = b[:4]
	}
	return hex.EncodeToString(b)
}

// shortHex shortens a hex id string the same way as shortID.
func shortHex(s string) string {
	if s == "" {
		return "-"
	}
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

// formatTime formats a unix time in milliseconds in local time, or "-".
func formatTime(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return time.UnixMilli(ms).Local().Format("2006-01-02 15:04:05")
}

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// cellReplacer keeps a cell on one line and in one column.
var cellReplacer = strings.NewReplacer("\t", " ", "\n", " ")

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cells ...string) {
	clean := make([]string, len(cells))
	for i, c := range cells {
		clean[i] = cellReplacer.Replace(c)
	}
	fmt.Fprintln(t.tw, strings.Join(clean, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// plural formats n with the singular or plural noun.
func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
