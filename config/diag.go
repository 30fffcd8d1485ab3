package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agext/levenshtein"
	"github.com/hashicorp/hcl/v2"
)

// FormatDiagnostics renders diags the way terraform does: severity and
// summary, the file:line:column, a snippet of the source with the offending
// range underlined, and the detail. files supplies the source (see
// Node.Files and DiagnosticsError.Files); diagnostics whose file is missing
// are rendered without a snippet. width wraps the detail text (0: no
// wrapping); color adds VT100 colour codes for terminals.
func FormatDiagnostics(diags hcl.Diagnostics, files map[string]*hcl.File, width uint, color bool) string {
	var b strings.Builder
	w := hcl.NewDiagnosticTextWriter(&b, files, width, color)
	// Writing to a strings.Builder cannot fail.
	_ = w.WriteDiagnostics(diags)
	return b.String()
}

// DiagnosticsError is an error carrying the diagnostics of a failed load or
// validation and the source files they refer to. Use errors.As to get it
// back from a wrapped error, and Format to render it with source snippets.
type DiagnosticsError struct {
	Diags hcl.Diagnostics
	Files map[string]*hcl.File
}

// NewDiagnosticsError returns a *DiagnosticsError when diags contains errors
// and nil otherwise (warnings alone are not an error).
func NewDiagnosticsError(diags hcl.Diagnostics, files map[string]*hcl.File) error {
	if !diags.HasErrors() {
		return nil
	}
	return &DiagnosticsError{Diags: diags, Files: files}
}

// Error renders each error diagnostic on its own line as
// "file:line,col: summary; detail" (without the position when the
// diagnostic has no source range).
func (e *DiagnosticsError) Error() string {
	var lines []string
	for _, d := range e.Diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += "; " + d.Detail
		}
		if d.Subject != nil {
			msg = fmt.Sprintf("%s:%d,%d: %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, msg)
		}
		lines = append(lines, msg)
	}
	if len(lines) == 0 {
		return "config: no errors"
	}
	return strings.Join(lines, "\n")
}

// Format renders the diagnostics with FormatDiagnostics.
func (e *DiagnosticsError) Format(width uint, color bool) string {
	return FormatDiagnostics(e.Diags, e.Files, width, color)
}

// Is reports whether target is also a *DiagnosticsError, so that
// errors.Is(err, &DiagnosticsError{}) tests for the kind of error.
func (e *DiagnosticsError) Is(target error) bool {
	var t *DiagnosticsError
	return errors.As(target, &t)
}

// Suggest returns the option closest to given (ignoring case) when it is
// close enough to be a likely typo, or "" when none is. A prefix match of at
// least three characters counts too, so "warning" suggests "warn".
func Suggest(given string, options []string) string {
	g := strings.ToLower(given)
	for _, o := range options {
		if levenshtein.Distance(g, strings.ToLower(o), nil) < 3 {
			return o
		}
	}
	if len(g) >= 3 {
		for _, o := range options {
			lo := strings.ToLower(o)
			if strings.HasPrefix(lo, g) || strings.HasPrefix(g, lo) {
				return o
			}
		}
	}
	return ""
}

// didYouMean formats a suggestion as a sentence to append to a detail, or ""
// when there is none.
func didYouMean(given string, options []string) string {
	if s := Suggest(given, options); s != "" {
		return fmt.Sprintf(" Did you mean %q?", s)
	}
	return ""
}

// sortDiagnostics orders diagnostics by position (those without a position
// first), so output does not depend on map iteration order.
func sortDiagnostics(diags hcl.Diagnostics) {
	slices.SortStableFunc(diags, func(a, b *hcl.Diagnostic) int {
		ra, rb := a.Subject, b.Subject
		switch {
		case ra == nil && rb == nil:
			return 0
		case ra == nil:
			return -1
		case rb == nil:
			return 1
		}
		if c := strings.Compare(ra.Filename, rb.Filename); c != 0 {
			return c
		}
		return ra.Start.Byte - rb.Start.Byte
	})
}
