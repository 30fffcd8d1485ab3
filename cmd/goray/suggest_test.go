package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestSuggestions: typos of subcommands at any level and of flags get "did
// you mean", and exit 2.
func TestSuggestions(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"lsit"}, `unknown command "lsit" for "goray"; did you mean "list"?`},
		{[]string{"list", "nodez"}, `unknown command "nodez" for "goray list"; did you mean "nodes"?`},
		{[]string{"plugins", "lst"}, `did you mean "list"?`},
		{[]string{"auth", "xyzzy"}, `unknown command "xyzzy" for "goray auth" (one of: `},
		{[]string{"start", "--haed"}, `unknown flag: --haed; did you mean --head?`},
		{[]string{"status", "--jsn"}, `did you mean --json?`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not say %q", stderr.String(), tc.want)
			}
		})
	}
}
