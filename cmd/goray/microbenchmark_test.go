package main

import (
	"strings"
	"testing"
)

// TestMicrobenchmarkFlags: bad flags are refused before anything runs,
// naming the flag.
func TestMicrobenchmarkFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"microbenchmark", "--settle", "-1s"}, "--settle -1s: want a duration of 0 or more"},
		{[]string{"microbenchmark", "--settle", "soon"}, `invalid argument "soon" for "--settle"`},
		{[]string{"microbenchmark", "--filter", "("}, "--filter: error parsing regexp"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := gorayRun(tt.args...)
			if r.code == exitOK || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want a failure saying %q", r.code, r.stderr, tt.want)
			}
		})
	}
}
