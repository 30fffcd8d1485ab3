package awsprovider

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/goray-dev/goray/sdk/provider"
)

// TestShellWord: every argument of the node's command line comes out of
// a real shell as it went in, with the placeholders replaced by the
// variables' values, whatever quotes, spaces and dollars it holds.
func TestShellWord(t *testing.T) {
	args := []string{
		"plain", "", "two words", "it's", `"double"`, "$HOME", "`date`", "back\\slash", "new\nline", "*",
		phInstanceID, phDir + "/t", `{"goray.io/instance-id":"` + phInstanceID + `","x":"it's $y"}`,
		phNodeIP + phNodeIP, "a" + phDir + "b" + phInstanceID,
	}
	words := make([]string, len(args))
	for i, a := range args {
		words[i] = shellWord(a)
	}
	script := "INSTANCE_ID=i-0123456789abcdef0\nNODE_IP=10.1.2.3\nGORAY_DIR=/var/lib/goray\nHOME=/nowhere\nfor a in " +
		strings.Join(words, " ") + "; do printf '%s\\0' \"$a\"; done\n"
	out, err := exec.Command("/bin/sh", "-c", script).Output()
	if err != nil {
		t.Fatalf("sh: %v", err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	r := strings.NewReplacer(phInstanceID, "i-0123456789abcdef0", phNodeIP, "10.1.2.3", phDir, "/var/lib/goray")
	if len(got) != len(args) {
		t.Fatalf("the shell saw %d words, want %d: %q", len(got), len(args), got)
	}
	for i, a := range args {
		if want := r.Replace(a); got[i] != want {
			t.Errorf("%q (written %s) came out as %q; want %q", a, words[i], got[i], want)
		}
	}
}

// TestRenderRefuses: user data EC2 cannot take, or that would break the
// script, is refused.
func TestRenderRefuses(t *testing.T) {
	u := userData{cluster: "c", nodeType: "cpu", requestID: "r", gorayPath: "/usr/local/bin/goray", instanceDir: "/var/lib/goray",
		node: provider.NodeSpec{HeadAddress: "10.0.0.1:6380", AuthToken: "tok-0123456789"}}
	if _, err := u.render(); err != nil {
		t.Fatal(err)
	}
	big := u
	big.node.SetupCommands = []string{strings.Repeat("x", MaxUserData)}
	if _, err := big.render(); !errors.Is(err, provider.ErrInvalidRequest) || !strings.Contains(err.Error(), "EC2 takes at most 16384") {
		t.Errorf("user data over 16 KiB: %v", err)
	}
	nl := u
	nl.node.AuthToken = "tok\nen-0123456789"
	if _, err := nl.render(); !errors.Is(err, provider.ErrInvalidRequest) || strings.Contains(err.Error(), "en-0123456789") {
		t.Errorf("a token with a newline: %v", err)
	}
	ph := u
	ph.extraArgs = []string{"--x", phPrefix + "Y@@"}
	if _, err := ph.render(); !errors.Is(err, provider.ErrInvalidRequest) {
		t.Errorf("extra_args with the placeholder prefix: %v", err)
	}
	noTok := u
	noTok.node.AuthToken = ""
	ud, err := noTok.render()
	if err != nil || strings.Contains(ud, "auth_token") {
		t.Errorf("no token: %v; the user data should write and pass no token file:\n%s", err, ud)
	}
	odd := u
	odd.cluster = "two\nlines"
	if ud, err := odd.render(); err != nil || strings.Contains(ud, "two\nlines") {
		t.Errorf("a cluster name with a newline is not quoted in the comment: %v", err)
	}
}
