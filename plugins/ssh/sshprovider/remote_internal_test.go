package sshprovider

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sh runs script with sh here (the scripts run the same way on a host),
// stdin from stdin, and returns its stdout.
func sh(t *testing.T, script, stdin string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script, "goray-provider-ssh")
	cmd.Stdin = strings.NewReader(stdin)
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return string(out), &ExitError{Status: cmd.ProcessState.ExitCode(), Output: errb.String()}
	}
	return string(out), nil
}

// TestScripts runs the host scripts on this machine: prepare makes an
// owner-only remote_dir and says whether the binary is there; install
// writes the token and the record and prunes binaries not in use; scan
// reads the record back; stop leaves another instance's files alone and
// removes its own.
func TestScripts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r")
	bin := binPath(dir, "abc")
	out, err := sh(t, prepareScript(dir, bin), "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseScan(out)
	if err != nil || r.binary || r.record != nil {
		t.Fatalf("prepare of an empty host: %+v, %v (output %q)", r, err, out)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("remote_dir: %v, %v; want mode 0700", st, err)
	}
	payload := "#!/bin/sh\necho fake goray\n"
	if _, err := sh(t, uploadScript(dir, "abc", int64(len(payload))+1), payload); err == nil || !strings.Contains(err.Error(), "arrived with") {
		t.Fatalf("an upload of the wrong size: %v; want it refused", err)
	}
	if _, err := os.Stat(bin); err == nil {
		t.Fatal("a refused upload left the binary in place")
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte(payload), 0o700); err != nil {
		t.Fatal(err)
	}
	old := binPath(dir, "old")
	if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
		t.Fatal(err)
	}
	rec := &hostRecord{Version: recordVersion, Cluster: "c", ID: "ssh-c-1", RequestID: "r'1", NodeType: "cpu", LaunchedAt: time.Now().UTC(), Goray: bin}
	script, err := installScript(dir, rec, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sh(t, script, "secret-token"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "token")); err != nil || string(b) != "secret-token" {
		t.Fatalf("token %q, %v", b, err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "token")); st.Mode().Perm() != 0o600 {
		t.Errorf("token mode %v", st.Mode())
	}
	if _, err := os.Stat(filepath.Dir(old)); !os.IsNotExist(err) {
		t.Errorf("a binary not in use was kept: %v", err)
	}
	out, err = sh(t, prepareScript(dir, bin), "")
	if err != nil {
		t.Fatal(err)
	}
	r, err = parseScan(out)
	if err != nil || !r.binary || r.record == nil || *r.record != *rec || r.node != nodeUnstarted {
		t.Fatalf("prepare after install: %+v (record %+v), %v; want the binary, the record, unstarted", r, r.record, err)
	}
	// The stop of another instance leaves this one's files.
	out, err = sh(t, stopScript(dir, "ssh-c-2", bin, time.Second), "")
	if err != nil || !strings.Contains(out, markStop+" other") {
		t.Fatalf("stop of another instance: %q, %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "token")); err != nil {
		t.Fatalf("the stop of another instance removed the token: %v", err)
	}
	out, err = sh(t, stopScript(dir, "ssh-c-1", bin, time.Second), "")
	if err != nil || !strings.Contains(out, markStop+" done") {
		t.Fatalf("stop: %q, %v", out, err)
	}
	for _, f := range []string{"token", "instance.json", "node.pid", "n"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s left after the stop: %v", f, err)
		}
	}
	out, err = sh(t, scanScript(dir), "")
	if r, perr := parseScan(out); err != nil || perr != nil || r.record != nil {
		t.Fatalf("scan after the stop: %+v, %v, %v", r, err, perr)
	}
	// A remote_dir that is a symbolic link is refused.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := sh(t, prepareScript(link, bin), ""); err == nil || !strings.Contains(err.Error(), "refusing to use it") {
		t.Errorf("prepare of a symlinked remote_dir: %v; want it refused", err)
	}
}

func TestParseHost(t *testing.T) {
	for _, tc := range []struct {
		in, key, name string
		port          int
		err           string
	}{
		{"10.0.0.1", "10.0.0.1:22", "10.0.0.1", 22, ""},
		{"node1.example:2222", "node1.example:2222", "node1.example", 2222, ""},
		{"::1", "[::1]:22", "::1", 22, ""},
		{"[fe80::1]:2200", "[fe80::1]:2200", "fe80::1", 2200, ""},
		{"", "", "", 0, "empty"},
		{"h:0", "", "", 0, "no valid port"},
		{"h:x", "", "", 0, "no valid port"},
		{"a$b", "", "", 0, "not a host name"},
		{"fe80::1::2", "", "", 0, "is not host, host:port"},
	} {
		h, err := parseHost(tc.in, 22)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v; want an error saying %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || h.key != tc.key || h.name != tc.name || h.port != tc.port {
			t.Errorf("%q: %+v, %v; want %s, %s, %d", tc.in, h, err, tc.key, tc.name, tc.port)
		}
	}
	d, err := expandRemoteDir("/tmp/g-{host}-{port}", &host{name: "10.0.0.1", port: 22})
	if err != nil || d != "/tmp/g-10.0.0.1-22" {
		t.Errorf("expandRemoteDir: %q, %v", d, err)
	}
}
