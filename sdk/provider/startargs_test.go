package provider_test

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/goray-dev/goray/sdk/provider"
)

func TestStartArgs(t *testing.T) {
	spec := provider.NodeSpec{HeadAddress: "10.0.0.1:6379", AuthToken: "secret-token-0123456789",
		Resources: map[string]float64{"CPU": 2, "memory": 1 << 30, "tpu": 1}, Labels: map[string]string{"zone": "a"}}
	tests := []struct {
		name string
		spec provider.NodeSpec
		o    provider.StartOptions
		want []string
		err  string
	}{
		{name: "all", spec: spec, o: provider.StartOptions{Goray: "/opt/goray", NodeIP: "10.0.0.7", TempDir: "/t", InstanceID: "i-1",
			Block: true, ReadyFile: "/t/ready", TokenFile: "/t/.token", Extra: []string{"--log-level", "debug"}},
			want: []string{"/opt/goray", "start", "--address", "10.0.0.1:6379", "--node-ip", "10.0.0.7", "--temp-dir", "/t", "--block",
				"--ready-file", "/t/ready", "--auth-token-file", "/t/.token", "--node-name", "i-1", "--num-cpus", "2", "--memory", "1073741824",
				"--resources", `{"tpu":1}`, "--labels", `{"goray.io/instance-id":"i-1","zone":"a"}`, "--log-level", "debug"}},
		{name: "defaults", spec: provider.NodeSpec{HeadAddress: "h:1"}, o: provider.StartOptions{InstanceID: "i-2"},
			want: []string{"goray", "start", "--address", "h:1", "--node-name", "i-2", "--labels", `{"goray.io/instance-id":"i-2"}`}},
		{name: "spec's binary", spec: provider.NodeSpec{HeadAddress: "h:1", GorayBinary: "/usr/bin/goray"}, o: provider.StartOptions{InstanceID: "i-3"},
			want: []string{"/usr/bin/goray", "start", "--address", "h:1", "--node-name", "i-3", "--labels", `{"goray.io/instance-id":"i-3"}`}},
		{name: "no instance", spec: spec, err: "InstanceID is empty"},
		{name: "negative", spec: provider.NodeSpec{Resources: map[string]float64{"CPU": -1}}, o: provider.StartOptions{InstanceID: "i"}, err: `resource "CPU" has amount -1`},
		{name: "no store", spec: provider.NodeSpec{Resources: map[string]float64{"object_store_memory": 0}}, o: provider.StartOptions{InstanceID: "i"}, err: "the object store needs at least 1"},
	}
	for _, tc := range tests {
		got, err := tc.spec.StartArgs(tc.o)
		if tc.err != "" {
			if !errors.Is(err, provider.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v; want ErrInvalidRequest saying %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q, %v\nwant %q", tc.name, got, err, tc.want)
		}
		if strings.Contains(strings.Join(got, " "), spec.AuthToken) {
			t.Errorf("%s: the token is on the command line", tc.name)
		}
	}
}

// TestShellJoin: a shell given ShellJoin's output sees the arguments
// unchanged.
func TestShellJoin(t *testing.T) {
	args := []string{"plain", "with space", `it's`, `{"a":1}`, "", "$HOME", "a\nb", `back\slash`, "*"}
	got, err := exec.Command("/bin/sh", "-c", `for a in `+provider.ShellJoin(args)+`; do printf '%s\0' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(args, "\x00") + "\x00"; string(got) != want {
		t.Errorf("the shell saw %q, want %q", got, want)
	}
	if got := provider.ShellJoin([]string{"goray", "start", "--address", "10.0.0.1:6379"}); got != "goray start --address 10.0.0.1:6379" {
		t.Errorf("plain arguments were quoted: %s", got)
	}
}
