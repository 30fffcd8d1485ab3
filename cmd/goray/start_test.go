package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/host/node"
	"github.com/spf13/pflag"
)

func ptr[T any](v T) *T { return &v }

// parseStart parses start flags as the command does.
func parseStart(t *testing.T, args ...string) (*startOptions, *pflag.FlagSet) {
	t.Helper()
	var o startOptions
	fs := pflag.NewFlagSet("start", pflag.ContinueOnError)
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return &o, fs
}

func TestStartConfigFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		logLevel string
		want     config.Flags
		wantErr  string
	}{
		{name: "head only", args: []string{"--head"}, want: config.Flags{Head: ptr(true)}},
		{name: "join", args: []string{"--address", "10.0.0.1:6380"}, want: config.Flags{Address: "10.0.0.1:6380"}},
		{name: "explicit not head", args: []string{"--head=false", "--address", "h:1"}, want: config.Flags{Head: ptr(false), Address: "h:1"}},
		{
			name: "everything",
			args: []string{"--head", "--port", "7000", "--temp-dir", "/tmp/x", "--num-cpus", "1.5", "--num-gpus", "0",
				"--resources", `{"disk": 2, "tpu": 0.5}`, "--labels", "zone=a, rack=3", "--object-store-memory", "2GiB", "--node-name", "n1"},
			logLevel: "debug",
			want: config.Flags{Head: ptr(true), Port: 7000, TempDir: "/tmp/x", LogLevel: "debug", NodeName: "n1",
				CPUs: ptr(1.5), GPUs: ptr(0.0), ObjectStoreMemory: 2 << 30,
				Resources: map[string]float64{"disk": 2, "tpu": 0.5}, Labels: map[string]string{"zone": "a", "rack": "3"}},
		},
		{name: "unset numbers stay nil", args: []string{"--head"}, want: config.Flags{Head: ptr(true)}},
		{name: "resources list", args: []string{"--resources", "disk=2,tpu=1"}, want: config.Flags{Resources: map[string]float64{"disk": 2, "tpu": 1}}},
		{name: "store bytes", args: []string{"--object-store-memory", "1048576"}, want: config.Flags{ObjectStoreMemory: 1 << 20}},
		{name: "memory", args: []string{"--memory", "4GiB"}, want: config.Flags{Memory: 4 << 30}},
		{name: "bad memory", args: []string{"--memory", "lots"}, wantErr: "invalid --memory"},
		{name: "zero memory", args: []string{"--memory", "0"}, wantErr: "want a positive size"},
		{name: "bad size", args: []string{"--object-store-memory", "lots"}, wantErr: "invalid --object-store-memory"},
		{name: "zero size", args: []string{"--object-store-memory", "0"}, wantErr: "positive size"},
		{name: "bad resources", args: []string{"--resources", "disk"}, wantErr: "invalid --resources"},
		{name: "bad labels", args: []string{"--labels", `{"a": 1}`}, wantErr: "invalid --labels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, fs := parseStart(t, tt.args...)
			got, err := o.configFlags(fs, tt.logLevel)
			if tt.wantErr != "" {
				var ue *usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want a usage error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("configFlags =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestParseResources(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]float64
		wantErr bool
	}{
		{`{"a": 1, "b": 0.25}`, map[string]float64{"a": 1, "b": 0.25}, false},
		{"a=1, b=0.25,", map[string]float64{"a": 1, "b": 0.25}, false},
		{"a=x", nil, true},
		{"=1", nil, true},
		{"a=-1", nil, true},
		{`{"a": "1"}`, nil, true},
		{`{"": 1}`, nil, true},
		{",", nil, true},
	}
	for _, tt := range tests {
		got, err := parseResources(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseResources(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseResources(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestFlagsOverrideConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node.hcl")
	writeFile(t, path, `node_name = "from-file"
temp_dir  = "rel/dir"
head {
  address = "127.0.0.1:7100"
}
resources {
  CPU    = 4
  custom = { disk = 1, tape = 3 }
}
object_store {
  memory = "1GiB"
}
`)
	o, fs := parseStart(t, "--config", path, "--num-cpus", "2", "--resources", "disk=5", "--port", "7200")
	f, err := o.configFlags(fs, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := loadConfig(o.configPath, f)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Head || cfg.Address != "127.0.0.1:7100" || cfg.Port != 7200 {
		t.Errorf("head %v address %q port %d; want head at 127.0.0.1:7100 with port 7200", cfg.Head, cfg.Address, cfg.Port)
	}
	if cfg.NodeName != "from-file" {
		t.Errorf("node name %q, want the file's", cfg.NodeName)
	}
	if cfg.Resources.CPU == nil || *cfg.Resources.CPU != 2 {
		t.Errorf("CPU %v, want the flag's 2", cfg.Resources.CPU)
	}
	if want := map[string]float64{"disk": 5, "tape": 3}; !reflect.DeepEqual(cfg.Resources.Custom, want) {
		t.Errorf("custom %v, want %v", cfg.Resources.Custom, want)
	}
	if cfg.ObjectStore.Memory != 1<<30 {
		t.Errorf("store memory %d, want the file's 1GiB", cfg.ObjectStore.Memory)
	}
	if !filepath.IsAbs(cfg.TempDir) || !strings.HasSuffix(cfg.TempDir, "rel/dir") {
		t.Errorf("temp dir %q, want rel/dir made absolute", cfg.TempDir)
	}

	// Without a file the defaults apply.
	o, fs = parseStart(t, "--head")
	f, _ = o.configFlags(fs, "")
	cfg, _, err = loadConfig("", f)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Address != config.DefaultHeadAddress || cfg.TempDir != defaultTempDir {
		t.Errorf("defaults: address %q temp dir %q", cfg.Address, cfg.TempDir)
	}
}

func TestStartBadConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.hcl")
	writeFile(t, path, "node_name = \"x\"\nobjekt_store {\n  memory = \"1GiB\"\n}\n")
	var stdout, stderr bytes.Buffer
	code := run([]string{"start", "--head", "--config", path}, &stdout, &stderr)
	if code != exitError {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitError, stderr.String())
	}
	out := stderr.String()
	for _, want := range []string{path + ":2", `Did you mean "object_store"?`, "Error: invalid configuration"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "Error: invalid configuration"); n != 1 {
		t.Errorf("summary printed %d times", n)
	}
	if strings.Contains(out, "Usage:") {
		t.Errorf("usage dumped on a runtime error:\n%s", out)
	}
}

func TestStartInvalidFlagValue(t *testing.T) {
	// A value only Validate rejects still reports as a config error.
	var stdout, stderr bytes.Buffer
	code := run([]string{"start", "--head", "--num-cpus", "-1", "--temp-dir", t.TempDir()}, &stdout, &stderr)
	if code != exitError {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitError, stderr.String())
	}
	if !strings.Contains(stderr.String(), "Invalid resource amount") {
		t.Errorf("stderr lacks the validation error:\n%s", stderr.String())
	}
}

func TestReadyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ready")
	if _, ok := readReadyFile(path); ok {
		t.Fatal("missing ready file reads as ready")
	}
	writeFile(t, path, `{"node_id": "ab`)
	if _, ok := readReadyFile(path); ok {
		t.Fatal("partial ready file reads as ready")
	}
	want := node.Info{NodeID: "abcd", Head: true, GCSAddress: "127.0.0.1:1", Pid: 42, SessionDir: "/tmp/s"}
	if err := writeReadyFile(path, want); err != nil {
		t.Fatal(err)
	}
	got, ok := readReadyFile(path)
	if !ok || got != want {
		t.Errorf("readReadyFile = %+v, %v; want %+v", got, ok, want)
	}
}

func TestWaitReady(t *testing.T) {
	ctx := context.Background()
	t.Run("ready", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ready")
		if err := writeReadyFile(path, node.Info{NodeID: "ab"}); err != nil {
			t.Fatal(err)
		}
		info, err := waitReady(ctx, path, make(chan error), time.Minute)
		if err != nil || info.NodeID != "ab" {
			t.Errorf("waitReady = %+v, %v", info, err)
		}
	})
	t.Run("exited", func(t *testing.T) {
		exited := make(chan error, 1)
		exited <- errors.New("exit status 1")
		_, err := waitReady(ctx, filepath.Join(t.TempDir(), "ready"), exited, time.Minute)
		var ee *earlyExitError
		if !errors.As(err, &ee) || !strings.Contains(err.Error(), "exit status 1") {
			t.Errorf("error = %v, want an earlyExitError naming the status", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		_, err := waitReady(ctx, filepath.Join(t.TempDir(), "ready"), make(chan error), 100*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "did not start serving within 100ms") {
			t.Errorf("error = %v, want a timeout", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := waitReady(cctx, filepath.Join(t.TempDir(), "ready"), make(chan error), time.Minute)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error = %v, want context.Canceled", err)
		}
	})
}

func TestWriteStarted(t *testing.T) {
	var b bytes.Buffer
	writeStarted(&b, node.Info{NodeID: "0123456789abcdef", Head: true, GCSAddress: "127.0.0.1:7000", SessionDir: "/tmp/elsewhere/session_x"}, 99, nodeAuth{})
	for _, want := range []string{"Started goray head node 01234567 (pid 99)", "export GORAY_ADDRESS=127.0.0.1:7000", "goray status", "goray stop --temp-dir /tmp/elsewhere"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}
