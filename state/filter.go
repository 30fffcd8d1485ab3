package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// DefaultLimit is how many rows a list shows unless told otherwise (as
// Ray's).
const DefaultLimit = 100

// Filter keeps the rows whose field Key (the row's JSON name) equals
// Value, ignoring case.
type Filter struct {
	Key   string
	Value string
}

// FilterError says a filter is malformed or names no field of the rows.
type FilterError struct {
	// Filter is the filter as given.
	Filter string
	Reason string
}

func (e *FilterError) Error() string { return fmt.Sprintf("--filter %q: %s", e.Filter, e.Reason) }

// ParseFilters parses key=value filters.
func ParseFilters(args []string) ([]Filter, error) {
	var out []Filter
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, &FilterError{Filter: a, Reason: "want key=value"}
		}
		out = append(out, Filter{Key: k, Value: strings.TrimSpace(v)})
	}
	return out, nil
}

// Keys returns the JSON names of the scalar fields of row type T: the keys
// its rows can be filtered on.
func Keys[T any]() []string {
	var keys []string
	t := reflect.TypeFor[T]()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		switch f.Type.Kind() {
		case reflect.String, reflect.Bool, reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint64, reflect.Float64:
			keys = append(keys, name)
		}
	}
	return keys
}

// CheckFilters fails for a filter on a key rows of type T lack, listing
// the valid ones.
func CheckFilters[T any](fs []Filter) error {
	keys := Keys[T]()
	for _, f := range fs {
		if !slices.Contains(keys, f.Key) {
			return &FilterError{Filter: f.Key + "=" + f.Value, Reason: fmt.Sprintf("no field %q; filter on one of %s", f.Key, strings.Join(keys, ", "))}
		}
	}
	return nil
}

// Page is one answer of a list: the rows kept, how many matched the
// filters, and whether the limit cut them.
type Page[T any] struct {
	Rows      []T
	Total     int
	Truncated bool
}

// Apply keeps the rows matching every filter, at most limit of them (0:
// all), in their order.
func Apply[T any](rows []T, fs []Filter, limit int) (Page[T], error) {
	if err := CheckFilters[T](fs); err != nil {
		return Page[T]{}, err
	}
	out := []T{}
	total := 0
	for _, r := range rows {
		ok, err := matches(r, fs)
		if err != nil {
			return Page[T]{}, err
		}
		if !ok {
			continue
		}
		total++
		if limit <= 0 || len(out) < limit {
			out = append(out, r)
		}
	}
	return Page[T]{Rows: out, Total: total, Truncated: len(out) < total}, nil
}

func matches(row any, fs []Filter) (bool, error) {
	if len(fs) == 0 {
		return true, nil
	}
	b, err := json.Marshal(row)
	if err != nil {
		return false, err
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // 1700000000000 stays that, not 1.7e+12
	if err := d.Decode(&m); err != nil {
		return false, err
	}
	for _, f := range fs {
		v, ok := m[f.Key]
		s := ""
		if ok && v != nil {
			s = fmt.Sprint(v)
		}
		if !strings.EqualFold(s, f.Value) {
			return false, nil
		}
	}
	return true, nil
}
