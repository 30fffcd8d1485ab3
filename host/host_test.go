package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/plugin"
)

func TestStartDecodesConfigAndServes(t *testing.T) {
	ctx := testCtx(t)
	dir := pluginDir(t, "goray-transport-test")
	n := nodeConfig(t, dir, `  config {
    greeting = "hello"
    size     = "2GiB"
    tags     = ["a", "b"]
    labels   = { zone = "z1" }
    ratio    = 0.5
    verbose  = true
    endpoint {
      address = "10.0.0.1:1"
    }
    endpoint {
      address = "10.0.0.2:2"
      weight  = 3
    }
  }
`)
	m, _ := newManager(t, n, Options{})
	mustStart(t, ctx, m)

	conn, v, err := m.Client("transport", "test")
	if err != nil {
		t.Fatal(err)
	}
	if v != 2 {
		t.Errorf("API version = %d, want 2", v)
	}
	got, err := echo(ctx, conn, "x")
	if err != nil || got != "v2 hello: x" {
		t.Fatalf("Echo = %q, %v; want %q", got, err, "v2 hello: x")
	}

	raw, err := echo(ctx, conn, "config")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"greeting": "hello",
		"size":     float64(2 << 30),
		"timeout":  "5s", // the schema's default
		"tags":     []any{"a", "b"},
		"labels":   map[string]any{"zone": "z1"},
		"ratio":    0.5,
		"verbose":  true,
		"endpoint": []any{
			map[string]any{"address": "10.0.0.1:1"},
			map[string]any{"address": "10.0.0.2:2", "weight": float64(3)},
		},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("plugin got config\n%v\nwant\n%v", cfg, want)
	}

	// Messages above gRPC's 4 MiB default pass both ways.
	big := strings.Repeat("z", 6<<20)
	got, err = echo(ctx, conn, big)
	if err != nil || len(got) != len(big)+len("v2 hello: ") {
		t.Errorf("6 MiB echo: len %d, %v", len(got), err)
	}

	s := status(t, m)
	if s.State != StateRunning || s.Version != "0.1.0" || s.APIVersion != 2 || s.Restarts != 0 ||
		s.Path != filepath.Join(dir, "goray-transport-test") || !alive(s.Pid) {
		t.Errorf("status = %+v", s)
	}
}

func TestBinaryLookupFallsBackToName(t *testing.T) {
	ctx := testCtx(t)
	dir := pluginDir(t, "test")
	m, _ := newManager(t, nodeConfig(t, dir, greetingBody), Options{})
	mustStart(t, ctx, m)
	if s := status(t, m); s.Path != filepath.Join(dir, "test") || s.State != StateRunning {
		t.Errorf("status = %+v", s)
	}
}

func TestConfigDiagnostics(t *testing.T) {
	// The plugin block header is on line 3; the body starts on line 4.
	tests := []struct {
		name    string
		body    string
		summary string
		line    int
		detail  []string
	}{
		{"unknown attribute", "  config {\n    greeting = \"x\"\n    sise = \"1GiB\"\n  }\n",
			"Unsupported argument", 6, []string{`"sise"`, `Did you mean "size"?`}},
		{"missing required", "  config {\n    size = 1\n  }\n",
			"Missing required argument", 4, []string{`"greeting"`}},
		{"no config block", "",
			"Missing required argument", 3, []string{`"greeting"`, "no config block"}},
		{"wrong type", "  config {\n    greeting = [\"a\"]\n  }\n",
			"Incorrect attribute value type", 5, []string{`"greeting"`, "a string is required, got tuple"}},
		{"bad size", "  config {\n    greeting = \"x\"\n    size = \"2 parsecs\"\n  }\n",
			"Invalid size", 6, []string{`"size"`, `"2 parsecs"`}},
		{"negative size", "  config {\n    greeting = \"x\"\n    size = -1\n  }\n",
			"Invalid size", 6, []string{"non-negative"}},
		{"bad duration", "  config {\n    greeting = \"x\"\n    timeout = \"soon\"\n  }\n",
			"Invalid duration", 6, []string{`"timeout"`, `"soon"`}},
		{"list element type", "  config {\n    greeting = \"x\"\n    tags = [\"a\", true]\n  }\n",
			"Incorrect attribute value type", 6, []string{"element 1", `"tags"`}},
		{"number for a string", "  config {\n    greeting = \"x\"\n    secret = 12\n  }\n",
			"Incorrect attribute value type", 6, []string{`"secret"`, "a string is required, got number"}},
		{"nested block required", "  config {\n    greeting = \"x\"\n    endpoint {\n      weight = 1\n    }\n  }\n",
			"Missing required argument", 6, []string{`"address"`}},
		{"unknown block", "  config {\n    greeting = \"x\"\n    endpoints {\n    }\n  }\n",
			"Unsupported block type", 6, []string{`Did you mean "endpoint"?`}},
		{"plugin rejects config", "  config {\n    greeting = \"reject-me\"\n  }\n",
			"Plugin rejected its configuration", 3, []string{`greeting "reject-me" is not allowed`}},
	}
	dir := pluginDir(t, "goray-transport-test")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			n := nodeConfig(t, dir, tc.body)
			m, _ := newManager(t, n, Options{})
			diags := m.Start(ctx)
			d := findDiag(diags, tc.summary)
			if d == nil {
				t.Fatalf("no %q diagnostic in:\n%s", tc.summary, diags.Error())
			}
			if d.Subject == nil || d.Subject.Filename != n.Filename || d.Subject.Start.Line != tc.line {
				t.Errorf("diagnostic at %v, want %s:%d", d.Subject, n.Filename, tc.line)
			}
			for _, want := range tc.detail {
				if !strings.Contains(d.Detail, want) {
					t.Errorf("detail %q does not contain %q", d.Detail, want)
				}
			}
			// Rendered with source, the error names the file and line.
			text := config.FormatDiagnostics(diags, n.Files(), 0, false)
			if !strings.Contains(text, "node.hcl line ") {
				t.Errorf("rendered diagnostics lack a position:\n%s", text)
			}
			s := status(t, m)
			if s.State != StateFailed || s.Pid != 0 || s.LastError == "" {
				t.Errorf("status = %+v, want failed without a process", s)
			}
			if _, _, err := m.Client("transport", "test"); !isUnavailable(err) {
				t.Errorf("Client error = %v, want ErrPluginUnavailable", err)
			}
		})
	}
}

func TestChecksumPin(t *testing.T) {
	dir := pluginDir(t, "goray-transport-test")
	b, err := os.ReadFile(testPluginBin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	actual := hex.EncodeToString(sum[:])
	wrong := strings.Repeat("ab", 32)
	tests := []struct {
		name, pin string
		summary   string
		detail    []string
	}{
		{"match", actual, "", nil},
		{"match upper case", strings.ToUpper(actual), "", nil},
		{"mismatch", wrong, "Plugin checksum mismatch",
			[]string{actual, wrong, filepath.Join(dir, "goray-transport-test")}},
		{"malformed", "abc", "Plugin checksum mismatch", []string{`"abc"`, "64 hexadecimal digits"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			n := nodeConfig(t, dir, "  sha256 = \""+tc.pin+"\"\n"+greetingBody)
			m, _ := newManager(t, n, Options{})
			diags := m.Start(ctx)
			if tc.summary == "" {
				if diags.HasErrors() {
					t.Fatalf("Start: %s", diags.Error())
				}
				if _, _, err := m.Client("transport", "test"); err != nil {
					t.Fatal(err)
				}
				return
			}
			d := findDiag(diags, tc.summary)
			if d == nil {
				t.Fatalf("no %q diagnostic in: %v", tc.summary, diags)
			}
			if d.Subject.Start.Line != 3 {
				t.Errorf("diagnostic on line %d, want 3 (the plugin block)", d.Subject.Start.Line)
			}
			for _, want := range tc.detail {
				if !strings.Contains(d.Detail, want) {
					t.Errorf("detail %q does not contain %q", d.Detail, want)
				}
			}
			if s := status(t, m); s.Pid != 0 || s.State != StateFailed {
				t.Errorf("status = %+v", s)
			}
		})
	}
}

func TestBinaryMissing(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	m, _ := newManager(t, nodeConfig(t, dir, greetingBody), Options{})
	d := findDiag(m.Start(ctx), "Plugin binary not found")
	if d == nil {
		t.Fatal("no diagnostic")
	}
	for _, want := range []string{dir, `"goray-transport-test"`, `"test"`} {
		if !strings.Contains(d.Detail, want) {
			t.Errorf("detail %q does not contain %q", d.Detail, want)
		}
	}
	if d.Subject.Start.Line != 3 {
		t.Errorf("line %d, want 3", d.Subject.Start.Line)
	}

	// No plugin_dir at all.
	n := nodeConfig(t, dir, greetingBody)
	n.PluginDir = ""
	m2 := New(Options{Blocks: n.Plugins, Supported: map[string][]int{"transport": {1}}})
	defer m2.Stop(context.Background())
	d = findDiag(m2.Start(ctx), "Plugin binary not found")
	if d == nil || !strings.Contains(d.Detail, "plugin_dir is not set") {
		t.Errorf("diagnostic = %v", d)
	}
}

func TestKindMismatch(t *testing.T) {
	ctx := testCtx(t)
	t.Setenv("GORAY_TESTPLUGIN_KIND", "storage")
	m, _ := newManager(t, nodeConfig(t, pluginDir(t, "goray-transport-test"), greetingBody), Options{})
	d := findDiag(m.Start(ctx), "Plugin kind mismatch")
	if d == nil {
		t.Fatal("no diagnostic")
	}
	if !strings.Contains(d.Detail, `is a "storage" plugin, not a "transport" plugin`) {
		t.Errorf("detail = %q", d.Detail)
	}
}

func TestUnsupportedKindAndDuplicates(t *testing.T) {
	ctx := testCtx(t)
	dir := pluginDir(t, "goray-transport-test")
	n := nodeConfig(t, dir, greetingBody)
	m, _ := newManager(t, n, Options{Supported: map[string][]int{"storage": {1}}})
	d := findDiag(m.Start(ctx), "Unsupported plugin kind")
	if d == nil || !strings.Contains(d.Detail, `does not run "transport" plugins; it runs storage`) {
		t.Errorf("diagnostic = %v", d)
	}

	n.Plugins = append(n.Plugins, n.Plugins[0])
	m2, _ := newManager(t, n, Options{})
	d = findDiag(m2.Start(ctx), "Duplicate plugin")
	if d == nil {
		t.Fatal("no duplicate diagnostic")
	}
	if len(m2.Plugins()) != 1 {
		t.Errorf("Plugins() = %+v, want the first block only", m2.Plugins())
	}
}

func TestAPIVersionNegotiation(t *testing.T) {
	tests := []struct {
		name    string
		plugin  string
		host    []int
		want    int
		wantErr string
	}{
		{"host older", "1,2", []int{1}, 1, ""},
		{"plugin older", "1,2", []int{2, 3}, 2, ""},
		{"highest common", "1,2,3", []int{1, 2, 3, 4}, 3, ""},
		{"only plugin's oldest", "1", []int{1, 2}, 1, ""},
		{"no overlap", "1,2", []int{3}, 0, "no API version in common with this host: the host speaks [3], the plugin offered 1"},
	}
	dir := pluginDir(t, "goray-transport-test")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			t.Setenv("GORAY_TESTPLUGIN_VERSIONS", tc.plugin)
			m, _ := newManager(t, nodeConfig(t, dir, greetingBody), Options{Supported: map[string][]int{"transport": tc.host}})
			diags := m.Start(ctx)
			if tc.wantErr != "" {
				d := findDiag(diags, "Plugin failed to start")
				if d == nil || !strings.Contains(d.Detail, tc.wantErr) {
					t.Fatalf("diagnostics = %v, want %q", diags, tc.wantErr)
				}
				return
			}
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			conn, v, err := m.Client("transport", "test")
			if err != nil || v != tc.want {
				t.Fatalf("Client = %d, %v; want %d", v, err, tc.want)
			}
			// The plugin registered the services of that version.
			got, err := echo(ctx, conn, "q")
			if want := "v" + string(rune('0'+tc.want)) + " hello: q"; err != nil || got != want {
				t.Errorf("Echo = %q, %v; want %q", got, err, want)
			}
		})
	}
}

func TestPluginLogsInHostLog(t *testing.T) {
	ctx := testCtx(t)
	m, logs := newManager(t, nodeConfig(t, pluginDir(t, "goray-transport-test"), greetingBody), Options{})
	mustStart(t, ctx, m)
	// go-plugin forwards the plugin's hclog entries under the binary's name.
	waitFor(t, 5*time.Second, "the plugin's log line", func() bool {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "node.plugin.goray-transport-test") &&
				strings.Contains(line, "testplugin configured") && strings.Contains(line, "greeting=hello") {
				return true
			}
		}
		return false
	})
}

func TestExitAtStartReportsOutput(t *testing.T) {
	ctx := testCtx(t)
	t.Setenv("GORAY_TESTPLUGIN_EXIT_AT_START", "1")
	m, _ := newManager(t, nodeConfig(t, pluginDir(t, "goray-transport-test"), greetingBody), Options{})
	d := findDiag(m.Start(ctx), "Plugin failed to start")
	if d == nil {
		t.Fatal("no diagnostic")
	}
	if !strings.Contains(d.Detail, "told to exit at start") {
		t.Errorf("detail %q lacks the plugin's output", d.Detail)
	}
}

func TestCrashRestartsAndInFlightCallsFail(t *testing.T) {
	ctx := testCtx(t)
	m, _ := newManager(t, nodeConfig(t, pluginDir(t, "goray-transport-test"), greetingBody), Options{})
	m.backoffMin = 300 * time.Millisecond // a restart window the test can observe
	mustStart(t, ctx, m)
	conn, _, err := m.Client("transport", "test")
	if err != nil {
		t.Fatal(err)
	}
	oldPid := status(t, m).Pid

	// A call blocked in the plugin fails when the plugin dies: no hang.
	hung := make(chan error, 1)
	go func() {
		_, err := echo(context.Background(), conn, "hang")
		hung <- err
	}()
	if _, err := echo(ctx, conn, "crash"); err == nil {
		t.Fatal("the crashing call succeeded")
	}
	select {
	case err := <-hung:
		if err == nil {
			t.Error("the in-flight call succeeded")
		}
	case <-time.After(waitfor.Generous):
		t.Fatal("the in-flight call hangs after the plugin crashed")
	}

	// During the restart window Client fails fast with ErrPluginUnavailable.
	var unavailable error
	waitFor(t, 5*time.Second, "Client to report the plugin unavailable", func() bool {
		_, _, err := m.Client("transport", "test")
		if isUnavailable(err) {
			unavailable = err
			return true
		}
		return false
	})
	var ue *UnavailableError
	if !errors.As(unavailable, &ue) || ue.State != StateRestarting || ue.Kind != "transport" || ue.Name != "test" ||
		!strings.Contains(unavailable.Error(), "exited") {
		t.Errorf("error = %v", unavailable)
	}
	if alive(oldPid) {
		t.Errorf("old plugin process %d still alive", oldPid)
	}

	waitFor(t, 10*time.Second, "the plugin to be restarted", func() bool {
		s := status(t, m)
		return s.State == StateRunning && s.Restarts >= 1
	})
	s := status(t, m)
	if s.Pid == oldPid || !alive(s.Pid) || !strings.Contains(s.LastError, "exited") {
		t.Errorf("status after restart = %+v (old pid %d)", s, oldPid)
	}
	conn, _, err = m.Client("transport", "test")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := echo(ctx, conn, "again"); err != nil || got != "v2 hello: again" {
		t.Errorf("Echo after restart = %q, %v (config must be re-applied)", got, err)
	}
}

func TestHealthFailureRestarts(t *testing.T) {
	ctx := testCtx(t)
	ctl := t.TempDir()
	t.Setenv("GORAY_TESTPLUGIN_CTL", ctl)
	m, _ := newManager(t, nodeConfig(t, pluginDir(t, "goray-transport-test"), greetingBody),
		Options{HealthInterval: 20 * time.Millisecond, HealthFailures: 3})
	mustStart(t, ctx, m)
	oldPid := status(t, m).Pid

	flag := filepath.Join(ctl, "fail-health")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a restart after failed health checks", func() bool {
		return status(t, m).Restarts >= 1
	})
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	if alive(oldPid) {
		t.Errorf("the unhealthy plugin %d was not killed", oldPid)
	}
	if s := status(t, m); !strings.Contains(s.LastError, "3 consecutive health checks failed") ||
		!strings.Contains(s.LastError, "told to fail") {
		t.Errorf("LastError = %q", s.LastError)
	}
	waitFor(t, 10*time.Second, "the plugin to run again", func() bool {
		_, _, err := m.Client("transport", "test")
		return err == nil
	})
	conn, _, _ := m.Client("transport", "test")
	if got, err := echo(ctx, conn, "ok"); err != nil || got != "v2 hello: ok" {
		t.Errorf("Echo = %q, %v", got, err)
	}
}

func TestRepeatedCrashesBackOff(t *testing.T) {
	ctx := testCtx(t)
	t.Setenv("GORAY_TESTPLUGIN_CRASH_AFTER", "2")
	m, _ := newManager(t, nodeConfig(t, pluginDir(t, "goray-transport-test"), greetingBody),
		Options{HealthInterval: 10 * time.Millisecond})
	m.backoffMin = 20 * time.Millisecond
	mustStart(t, ctx, m)
	start := time.Now()
	waitFor(t, 15*time.Second, "three restarts", func() bool {
		// The node keeps serving: Client answers at once, conn or error.
		if _, _, err := m.Client("transport", "test"); err != nil && !isUnavailable(err) {
			t.Fatalf("Client: %v", err)
		}
		return status(t, m).Restarts >= 3
	})
	// Backoff 20 + 40 + 80 ms before the third restart.
	if el := time.Since(start); el < 140*time.Millisecond {
		t.Errorf("three restarts took %s, want at least 140ms of backoff", el)
	}
	// The host sees the crash as the process's exit or, when its health
	// checks (every 10ms) fail before the exit is noticed on a busy
	// machine, as failed health checks: either names the failure.
	if s := status(t, m); !strings.Contains(s.LastError, "exited") && !strings.Contains(s.LastError, "health checks failed") {
		t.Errorf("LastError = %q, want the plugin's exit or its failed health checks", s.LastError)
	}
}

func TestStopLeavesNoProcess(t *testing.T) {
	ctx := testCtx(t)
	m, _ := newManager(t, nodeConfig(t, pluginDir(t, "goray-transport-test"), greetingBody), Options{})
	mustStart(t, ctx, m)
	pid := status(t, m).Pid
	if !alive(pid) {
		t.Fatalf("plugin %d not running", pid)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Errorf("plugin %d survives Stop", pid)
	}
	if err := m.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if s := status(t, m); s.State != StateStopped || s.Pid != 0 {
		t.Errorf("status = %+v", s)
	}
	var ue *UnavailableError
	if _, _, err := m.Client("transport", "test"); !errors.As(err, &ue) || ue.State != StateStopped {
		t.Errorf("Client after Stop: %v", err)
	}
	if _, _, err := m.Client("transport", "nope"); !errors.Is(err, ErrPluginNotFound) {
		t.Errorf("Client of an unknown plugin: %v", err)
	}
	if diags := m.Start(ctx); !diags.HasErrors() {
		t.Error("Start after Stop succeeded")
	}
}

func TestStartHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m, _ := newManager(t, nodeConfig(t, pluginDir(t, "goray-transport-test"), greetingBody), Options{})
	d := findDiag(m.Start(ctx), "Plugin failed to start")
	if d == nil || !strings.Contains(d.Detail, "context canceled") {
		t.Errorf("diagnostic = %v", d)
	}
}

func TestKillHostLeavesNoPlugin(t *testing.T) {
	dir := pluginDir(t, "goray-transport-test")
	// The killed host cannot remove its socket directory: keep it in one
	// the test removes.
	sockets, err := os.MkdirTemp("", "gp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockets) })
	cmd := exec.Command(testHostBin, dir, sockets)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid, err := readPid(out)
	if err != nil {
		t.Fatalf("reading the plugin pid: %v; host log:\n%s", err, logs.String())
	}
	if !alive(pid) {
		t.Fatalf("plugin %d not running", pid)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitFor(t, 10*time.Second, "the plugin to die with its host", func() bool { return !alive(pid) })
}

func TestCheck(t *testing.T) {
	ctx := testCtx(t)
	rep, err := Check(ctx, testPluginBin, "transport")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Kind != "transport" || rep.Name != "test" || rep.Version != "0.1.0" ||
		!reflect.DeepEqual(rep.APIVersions, []int{1, 2}) || !rep.Healthy || rep.Duration <= 0 {
		t.Errorf("report = %+v", rep)
	}
	if a := rep.Schema.Attributes["greeting"]; a.Type != plugin.TypeString || !a.Required {
		t.Errorf("greeting = %+v", a)
	}
	if a := rep.Schema.Attributes["timeout"]; a.Default != "5s" {
		t.Errorf("timeout default = %#v", a.Default)
	}
	if b := rep.Schema.Blocks["endpoint"]; !b.Repeated || !b.Schema.Attributes["address"].Required {
		t.Errorf("endpoint = %+v", b)
	}

	var km *KindMismatchError
	if _, err := Check(ctx, testPluginBin, "storage"); !errors.As(err, &km) || km.Got != "transport" {
		t.Errorf("Check as storage: %v", err)
	}

	script := filepath.Join(t.TempDir(), "notaplugin")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hello\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(ctx, script, ""); err == nil || !strings.Contains(err.Error(), "is not a goray plugin") {
		t.Errorf("Check of a script: %v", err)
	}
}

func TestLaunchHelper(t *testing.T) {
	ctx := testCtx(t)
	t.Setenv("GORAY_TESTPLUGIN_VERSIONS", "1,2,3")
	conn, v := Launch(ctx, t, testPluginBin, "transport", "anything", `greeting = "hey"`)
	if v != 3 {
		t.Errorf("API version = %d, want the plugin's highest, 3", v)
	}
	if got, err := echo(ctx, conn, "a"); err != nil || got != "v3 hey: a" {
		t.Errorf("Echo = %q, %v", got, err)
	}
}

func TestPluginRunByHandExplains(t *testing.T) {
	cmd := exec.Command(testPluginBin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit = %v, want status 1", err)
	}
	if !strings.Contains(string(out), `is a goray plugin: kind transport, name "test", version 0.1.0`) {
		t.Errorf("output = %q", out)
	}
}

// An orphaned plugin exits by itself (sdk/plugin watches its parent), even
// when its parent did not start it with Pdeathsig and died before the
// plugin could watch it.
func TestOrphanedPluginExits(t *testing.T) {
	tests := []struct{ name, script string }{
		{"host pid given", `GORAY_PLUGIN_HOST_PID=$$ "$0" >/dev/null 2>&1 & echo "pid $!"`},
		{"no host pid", `"$0" >/dev/null 2>&1 & echo "pid $!"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sockets, err := os.MkdirTemp("", "gp")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(sockets) })
			cmd := exec.Command("/bin/sh", "-c", tc.script, testPluginBin)
			cmd.Env = append(os.Environ(),
				plugin.Handshake.MagicCookieKey+"="+plugin.Handshake.MagicCookieValue,
				"PLUGIN_PROTOCOL_VERSIONS=1,2",
				"PLUGIN_UNIX_SOCKET_DIR="+sockets)
			out, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			pid, err := readPid(strings.NewReader(string(out)))
			if err != nil {
				t.Fatal(err)
			}
			// The shell has exited: the plugin must follow.
			waitFor(t, 10*time.Second, "the orphaned plugin to exit", func() bool { return !alive(pid) })
		})
	}
}

func TestPluginLogFile(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	n := nodeConfig(t, pluginDir(t, "goray-transport-test"), greetingBody)
	m, _ := newManager(t, n, Options{LogDir: dir})
	mustStart(t, ctx, m)
	path := filepath.Join(dir, LogFileName(n.Plugins[0].Kind, n.Plugins[0].Name))
	// The plugin's own hclog lines land in its file, as it wrote them.
	waitFor(t, 5*time.Second, "the plugin's log line in "+path, func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), "testplugin configured") && strings.Contains(string(b), `"greeting":"hello"`)
	})
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("plugin log file: %v, mode %v; want 0600", err, fi.Mode())
	}
}
