package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// goray is the path of the binary built for the end-to-end test.
var goray string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "goray-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goray = filepath.Join(dir, "goray")
	// Nodes the tests start keep their token here, never in ~/.goray.
	os.Setenv("GORAY_AUTH_TOKEN_PATH", filepath.Join(dir, "auth", "auth_token"))
	build := exec.Command("go", "build", "-o", goray, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building goray:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string
		stderr     string
		noUsageDmp bool
	}{
		{name: "help", args: []string{"--help"}, code: exitOK, stdout: "Usage:"},
		{name: "no command", args: nil, code: exitOK, stdout: "Available Commands:"},
		{name: "unknown command", args: []string{"launch"}, code: exitUsage, stderr: `Error: unknown command "launch" for "goray"`},
		{name: "unknown flag", args: []string{"status", "--bogus"}, code: exitUsage, stderr: "Error: unknown flag: --bogus"},
		{name: "bad flag value", args: []string{"start", "--head", "--port", "x"}, code: exitUsage, stderr: `invalid argument "x" for "--port"`},
		{name: "extra argument", args: []string{"status", "extra"}, code: exitUsage, stderr: "Error: unknown command"},
		{name: "start without role", args: []string{"start"}, code: exitUsage, stderr: "start needs --head, --address"},
		{name: "list without kind", args: []string{"list"}, code: exitUsage, stderr: "say what to list"},
		{name: "list unknown kind", args: []string{"list", "widgets"}, code: exitUsage, stderr: `unknown command "widgets" for "goray list"`},
		{name: "bad log level", args: []string{"--log-level", "loud", "version"}, code: exitUsage, stderr: `invalid --log-level "loud"`},
		{name: "negative grace", args: []string{"stop", "--grace", "-1s"}, code: exitUsage, stderr: "invalid --grace"},
		{name: "runtime error", args: []string{"status", "--temp-dir", "/nonexistent-goray-dir"}, code: exitError,
			stderr: "Error: no running goray cluster found", noUsageDmp: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(envAddress, "")
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tt.stdout, stdout.String())
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, stderr.String())
			}
			if n := strings.Count(stderr.String(), "Error:"); tt.code != exitOK && n != 1 {
				t.Errorf("stderr has %d \"Error:\" lines, want 1:\n%s", n, stderr.String())
			}
			if strings.Contains(stderr.String(), "Usage:") {
				t.Errorf("usage dumped on stderr:\n%s", stderr.String())
			}
			if tt.noUsageDmp && strings.Contains(stderr.String(), "--help") {
				t.Errorf("runtime error points at --help:\n%s", stderr.String())
			}
		})
	}
}

func TestVersion(t *testing.T) {
	read := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}, true
	}
	v := buildVersion(read)
	if v.Version != "dev" || v.Commit != "abc123" || !v.Modified || !strings.HasPrefix(v.GoVersion, "go") {
		t.Errorf("buildVersion = %+v", v)
	}
	var b bytes.Buffer
	if err := writeVersion(&b, v, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "goray dev") || !strings.Contains(b.String(), "commit: abc123 (modified)") {
		t.Errorf("text version:\n%s", b.String())
	}
	none := buildVersion(func() (*debug.BuildInfo, bool) { return nil, false })
	if none.Commit != "" {
		t.Errorf("commit without build info = %q", none.Commit)
	}

	var stdout, stderr bytes.Buffer
	if code := run([]string{"version", "--json"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var doc map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("version --json: %v\n%s", err, stdout.String())
	}
	if doc["version"] != "dev" || doc["go_version"] == nil || doc["platform"] == nil {
		t.Errorf("version JSON %v", doc)
	}
}

func TestVersionLdflags(t *testing.T) {
	out, err := exec.Command(goray, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "goray dev\n") {
		t.Errorf("goray version = %q, %v; want the default", out, err)
	}
	bin := filepath.Join(t.TempDir(), "goray")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.version=v9.8.7", ".")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	out, err = exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "goray v9.8.7\n") {
		t.Errorf("goray version = %q, %v; want v9.8.7 from -ldflags", out, err)
	}
}
