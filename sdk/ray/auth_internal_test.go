package ray

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDriverCredentials(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	if err := os.WriteFile(good, []byte("driver-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte("driver-token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GORAY_AUTH_TOKEN", "from-the-environment")
	tests := []struct {
		name, file, token, err string
	}{
		{name: "environment without a file", token: "from-the-environment"},
		{name: "the file wins", file: good, token: "driver-token"},
		{name: "a file others can read", file: open, err: "chmod 600"},
		{name: "a missing file", file: filepath.Join(dir, "none"), err: "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := driverCredentials(tt.file)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.err)
				}
				return
			}
			if err != nil || c.Token() != tt.token {
				t.Fatalf("token %q, %v; want %q", c.Token(), err, tt.token)
			}
		})
	}
}
