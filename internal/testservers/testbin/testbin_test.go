package testbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFind shows each place Find looks, the order it looks in, and what
// its errors say.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "module")
	writeFile(t, filepath.Join(root, "go.mod"), 0o644)
	t.Chdir(mkdir(t, filepath.Join(root, "internal", "pkg")))
	bin := writeFile(t, filepath.Join(dir, "bin", "srv"), 0o755)
	plain := writeFile(t, filepath.Join(dir, "plain", "srv"), 0o644)
	pathDir := filepath.Join(dir, "path")
	onPath := writeFile(t, filepath.Join(pathDir, "srv2"), 0o755)
	writeFile(t, filepath.Join(pathDir, "noexec"), 0o644)
	inTools := writeFile(t, filepath.Join(root, ".tools", "srv", "bin", "srv"), 0o755)

	const install = "run `make srv` (it installs Debian's srv package)"
	tests := []struct {
		name    string
		env     string // the value of $GORAY_TESTBIN_SRV ("": unset)
		spec    Spec
		want    string
		wantErr []string // what the error must say
	}{
		{name: "env override", env: bin,
			spec: Spec{Env: "GORAY_TESTBIN_SRV", Commands: []string{"srv2"}, Abs: plain}, want: bin},
		{name: "env override missing", env: filepath.Join(dir, "nope"),
			spec:    Spec{What: "srv", Env: "GORAY_TESTBIN_SRV", Commands: []string{"srv2"}},
			wantErr: []string{"srv named by $GORAY_TESTBIN_SRV", "nope"}},
		{name: "env override not executable", env: plain,
			spec:    Spec{What: "srv", Env: "GORAY_TESTBIN_SRV"},
			wantErr: []string{"$GORAY_TESTBIN_SRV", "not executable"}},
		{name: "env override relative where an absolute path is needed", env: "bin/srv",
			spec:    Spec{What: "srv", Env: "GORAY_TESTBIN_SRV", Absolute: "srv re-executes itself"},
			wantErr: []string{"$GORAY_TESTBIN_SRV", "not an absolute path", "srv re-executes itself"}},
		{name: "PATH, first found wins",
			spec: Spec{Env: "GORAY_TESTBIN_SRV", Commands: []string{"missing-srv", "noexec", "srv2"}, Abs: bin}, want: onPath},
		{name: ".tools after PATH",
			spec: Spec{Env: "GORAY_TESTBIN_SRV", Commands: []string{"missing-srv"}, Tools: "srv/bin/srv", Abs: bin}, want: inTools},
		{name: "absolute path",
			spec: Spec{Env: "GORAY_TESTBIN_SRV", Tools: "srv/missing", Abs: bin}, want: bin},
		{name: "absolute path not executable",
			spec:    Spec{What: "srv", Env: "GORAY_TESTBIN_SRV", Abs: plain, Install: install},
			wantErr: []string{"srv is not installed", plain, install + " or set $GORAY_TESTBIN_SRV"}},
		{name: "nowhere: the error names every place and the install hint",
			spec: Spec{What: "srv", Env: "GORAY_TESTBIN_SRV", Commands: []string{"missing-srv"}, Tools: "srv/missing", Install: install},
			wantErr: []string{"srv is not installed", "missing-srv on $PATH",
				filepath.Join(root, ".tools", "srv", "missing"), install + " or set $GORAY_TESTBIN_SRV"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PATH", pathDir)
			t.Setenv("GORAY_TESTBIN_SRV", tt.env)
			got, err := Find(tt.spec)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Find = %q; want an error", got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Find = %q; want %q", got, tt.want)
			}
		})
	}
}

// TestModuleRoot walks up from a subdirectory to the go.mod above it, and
// fails where there is none.
func TestModuleRoot(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "module")
	writeFile(t, filepath.Join(root, "go.mod"), 0o644)
	t.Chdir(mkdir(t, filepath.Join(root, "a", "b")))
	got, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if got != root {
		t.Errorf("ModuleRoot = %q; want %q", got, root)
	}

	t.Chdir(mkdir(t, filepath.Join(dir, "elsewhere")))
	// Above the temp dir there is no go.mod, or one of another tree: never
	// the sibling module.
	if got, err := ModuleRoot(); err == nil && strings.HasPrefix(got, dir) {
		t.Errorf("ModuleRoot = %q from a sibling of the module; want none below %s", got, dir)
	}
}

// mkdir makes the directory p and its parents, and returns p.
func mkdir(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeFile makes a file at p with the given mode, and its directories.
func writeFile(t *testing.T, p string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
	return p
}
