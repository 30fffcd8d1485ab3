package localprovider

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/goray-dev/goray/sdk/provider"
)

func TestNodeArgs(t *testing.T) {
	const id, ip, dir = "local-c-1", "127.0.1.1", "/s/_1"
	base := []string{"/bin/goray", "start", "--address", "10.0.0.1:6379", "--node-ip", ip, "--temp-dir", dir, "--block",
		"--ready-file", dir + "/ready.json", "--node-name", id}
	tests := []struct {
		name  string
		spec  provider.NodeSpec
		extra []string
		want  []string // after base
		err   string
	}{
		{name: "bare", spec: provider.NodeSpec{},
			want: []string{"--labels", `{"goray.io/instance-id":"local-c-1"}`}},
		{name: "resources", spec: provider.NodeSpec{
			Resources: map[string]float64{"CPU": 2, "GPU": 0.5, "object_store_memory": 64 << 20, "memory": 1 << 30, "disk": 3, "tpu": 1},
			Labels:    map[string]string{provider.LabelNodeType: "cpu", provider.LabelInstanceID: "spoofed"},
		}, extra: []string{"--log-level", "debug"},
			want: []string{"--num-cpus", "2", "--num-gpus", "0.5", "--memory", "1073741824", "--object-store-memory", "67108864",
				"--resources", `{"disk":3,"tpu":1}`,
				"--labels", `{"goray.io/instance-id":"local-c-1","goray.io/node-type":"cpu"}`,
				"--log-level", "debug"}},
		{name: "negative", spec: provider.NodeSpec{Resources: map[string]float64{"CPU": -1}}, err: `resource "CPU" has amount -1`},
		{name: "no store", spec: provider.NodeSpec{Resources: map[string]float64{"object_store_memory": 0}}, err: "the object store needs at least 1"},
	}
	for _, tc := range tests {
		tc.spec.HeadAddress = "10.0.0.1:6379"
		tc.spec.AuthToken = "secret-token-0123456789"
		argv, err := nodeArgs("/bin/goray", tc.spec, id, ip, dir, tc.extra)
		if tc.err != "" {
			if !errors.Is(err, provider.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v; want ErrInvalidRequest saying %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if want := append(slices.Clone(base), tc.want...); !slices.Equal(argv, want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, argv, want)
		}
		if strings.Contains(strings.Join(argv, " "), tc.spec.AuthToken) {
			t.Errorf("%s: the token is on the command line", tc.name)
		}
	}
	// Setup commands: a shell runs them, then execs goray with its
	// arguments untouched.
	argv, err := nodeArgs("/bin/goray", provider.NodeSpec{HeadAddress: "h:1", SetupCommands: []string{"apt-get install x", "echo 'a b'"}}, id, ip, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(argv) < 5 || argv[0] != "/bin/sh" || argv[1] != "-c" || argv[3] != setupArg0 || argv[4] != "/bin/goray" {
		t.Fatalf("with setup commands: %q", argv)
	}
	if want := "set -e\napt-get install x\necho 'a b'\nexec \"$@\"\n"; argv[2] != want {
		t.Errorf("script %q, want %q", argv[2], want)
	}
	if !hasTempDir(argv, dir) {
		t.Error("the setup shell's command line does not name the temp dir")
	}
}

func TestNodeEnv(t *testing.T) {
	base := []string{"PATH=/bin", "HOME=/h", "GORAY_AUTH_TOKEN=old", "GORAY_AUTH_TOKEN_PATH=/p", "GORAY_ADDRESS=x:1",
		"GORAY_PLUGIN=cookie", "GORAY_PLUGIN_HOST_PID=1", "PLUGIN_MIN_PORT=1", "GORAY_SESSION_DIR=/s", "GORAY_NODE_ID=n",
		"GORAY_WORKER_ID=w", "GORAY_RAYLET_SOCKET=/r", "GORAY_TLS_CA_FILE=/ca", "GORAY_LOG_LEVEL=debug",
		"GORAY_DAEMON_ROOT=/tmp/goray", "GORAY_GCS_REDIS_PASSWORD=pw", "GORAY_BINARY=/bin/goray", "GORAY_AUTH_MODE=token"}
	got := nodeEnv(base, "tok")
	want := []string{"PATH=/bin", "HOME=/h", "GORAY_TLS_CA_FILE=/ca", "GORAY_AUTH_MODE=token", "GORAY_AUTH_TOKEN=tok"}
	if !slices.Equal(got, want) {
		t.Errorf("nodeEnv:\n got %q\nwant %q", got, want)
	}
	if got := nodeEnv([]string{"PATH=/bin"}, ""); !slices.Equal(got, []string{"PATH=/bin"}) {
		t.Errorf("without a token: %q", got)
	}
}

func TestHasTempDir(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"goray", "start", "--temp-dir", "/s/_1"}, true},
		{[]string{"goray", "start", "--temp-dir=/s/_1"}, true},
		{[]string{"goray", "start", "--temp-dir", "/s/_10"}, false},
		{[]string{"goray", "start", "--temp-dir"}, false},
		{[]string{"sh", "/s/_1"}, false},
	}
	for _, tc := range tests {
		if got := hasTempDir(tc.args, "/s/_1"); got != tc.want {
			t.Errorf("hasTempDir(%q) = %v", tc.args, got)
		}
	}
}
