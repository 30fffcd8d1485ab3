package acceptance

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/auth"
)

// startFailToken is the token of commands that must fail before any head
// of this test binary has made the tests' token file.
const startFailToken = "startfail-acceptance-token"

// runGorayIn runs the goray CLI in dir with env added to its environment.
func runGorayIn(t *testing.T, ctx context.Context, dir string, env []string, args ...string) cliResult {
	t.Helper()
	cmd := exec.CommandContext(ctx, gorayBin, args...)
	cmd.Dir = dir
	cmd.Env = append(append(baseEnv(), env...), testMarkerEnv+"="+testMarker(t))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running goray %q: %v", args, err)
	}
	return r
}

// stopOnCleanup stops whatever runs under tempDir when the test ends.
func stopOnCleanup(t *testing.T, tempDir string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if r := runGoray(t, ctx, "stop", "--temp-dir", tempDir, "--force"); r.code != 0 {
			t.Logf("cleanup: goray stop: %s", r)
		}
	})
}

// wantFailure checks that a command failed and that its output says each
// of subs.
func wantFailure(t *testing.T, what string, r cliResult, subs ...string) {
	t.Helper()
	if r.code == 0 {
		t.Errorf("%s: want a failure, got %s", what, r)
		return
	}
	out := r.stdout + r.stderr
	for _, s := range subs {
		if !strings.Contains(out, s) {
			t.Errorf("%s: the output does not say %q:\n%s", what, s, r)
		}
	}
	t.Logf("%s: %s", what, strings.TrimSpace(out))
}

// TestStartGCSUnreachable: `goray start --address` of an address where
// nothing listens fails saying that it cannot reach the GCS there and why
// (connection refused). It used to wait out its 30 s and print only "the
// goray node did not start serving within 30s", the cause being in the
// node's log.
func TestStartGCSUnreachable(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := shortTempDir(t)
	stopOnCleanup(t, dir)
	addr := "127.0.0.1:" + strconv.Itoa(refusedPort(t))
	r := runGorayEnv(t, ctx, []string{auth.EnvToken + "=" + startFailToken},
		"start", "--address", addr, "--temp-dir", dir, "--node-ip", "127.0.0.1")
	wantFailure(t, "joining "+addr, r, "cannot reach the GCS at "+addr, "connection refused")
	if strings.Contains(r.stdout+r.stderr, "did not start serving") {
		t.Errorf("start waited for a node whose cause was known:\n%s", r)
	}
}

// TestTLSRelativeConfigAndMismatch: a head started with the README's tls
// block (paths relative to the file) through a relative --config from
// another directory runs a driver's tasks on its workers, which run in the
// driver's directory (they used to die with "open <dir>/certs/ca.pem: no
// such file"); and a node, a command and a driver without TLS against it
// each fail saying TLS is the problem (they got "error reading server
// preface: EOF", the node after waiting 30 s).
func TestTLSRelativeConfigAndMismatch(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	conf := shortTempDir(t)
	certs := filepath.Join(conf, "certs")
	if r := runGoray(t, ctx, "cert", "ca", "--dir", certs); r.code != 0 {
		t.Fatalf("goray cert ca: %s", r)
	}
	if r := runGoray(t, ctx, "cert", "issue", "--dir", certs, "--name", "node1", "--host", "127.0.0.1"); r.code != 0 {
		t.Fatalf("goray cert issue: %s", r)
	}
	readme := "tls {\n  ca_file   = \"certs/ca.pem\"\n  cert_file = \"certs/node1.pem\"\n  key_file  = \"certs/node1-key.pem\"\n}\n"
	if err := os.WriteFile(filepath.Join(conf, "node.hcl"), []byte(readme), 0o600); err != nil {
		t.Fatal(err)
	}
	tempDir := shortTempDir(t)
	stopOnCleanup(t, tempDir)
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	// From conf's parent, naming the config relative to it.
	r := runGorayIn(t, ctx, filepath.Dir(conf), nil, "start", "--head", "--address", addr, "--temp-dir", tempDir,
		"--dashboard-port", "-1", "--num-cpus", "2", "--config", filepath.Join(filepath.Base(conf), "node.hcl"))
	if r.code != 0 {
		t.Fatalf("goray start --head with a relative --config: %s", r)
	}
	driverTLS := auth.TLSFiles{CA: filepath.Join(certs, "ca.pem"), Cert: filepath.Join(certs, "node1.pem"), Key: filepath.Join(certs, "node1-key.pem")}
	wd, _ := os.Getwd()
	if wd == filepath.Dir(conf) {
		t.Fatalf("the driver must run in another directory than the head (%s)", wd)
	}
	j := startJob(t, jobOptions{addr: addr, env: tlsEnv(driverTLS)}, quickstartBin)
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("quickstart on the TLS head started with a relative --config exited %d:\n%s", code, out)
	}

	// A node without TLS joining it.
	nodeDir := shortTempDir(t)
	stopOnCleanup(t, nodeDir)
	r = runGoray(t, ctx, "start", "--address", addr, "--temp-dir", nodeDir, "--node-ip", "127.0.0.2")
	wantFailure(t, "a node without TLS", r, "TLS mismatch", addr, "tls block")
	// A command without TLS (and no node of its own to take TLS from).
	r = runGoray(t, ctx, "status", "--address", addr, "--temp-dir", shortTempDir(t))
	wantFailure(t, "goray status without TLS", r, "TLS mismatch", addr, auth.EnvTLSCA)
	// A driver without TLS.
	j = startJob(t, jobOptions{addr: addr}, quickstartBin)
	code, out := j.wait(ctx)
	wantFailure(t, "a driver without TLS", cliResult{code: code, stdout: out}, "TLS mismatch", addr, auth.EnvTLSCA)
}

// TestStartBadSettingsSayWhich: a start whose certificate path or port
// cannot work fails naming the file or port and the setting.
func TestStartBadSettingsSayWhich(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	certs := shortTempDir(t)
	if r := runGoray(t, ctx, "cert", "ca", "--dir", certs); r.code != 0 {
		t.Fatalf("goray cert ca: %s", r)
	}
	f := tlsFiles(t, ctx, certs, "node1", "127.0.0.1")
	missing := filepath.Join(certs, "missing-ca.pem")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	cases := []struct {
		name string
		env  []string
		args []string // after start --head --port P --temp-dir D
		want []string
	}{
		{"CA file from the environment missing",
			[]string{auth.EnvTLSCA + "=" + missing, auth.EnvTLSCert + "=" + f.Cert, auth.EnvTLSKey + "=" + f.Key}, nil,
			[]string{missing, auth.EnvTLSCA}},
		{"CA file from the config missing", nil,
			[]string{"--config", writeConfig(t, shortTempDir(t), tlsBlock(auth.TLSFiles{CA: missing, Cert: f.Cert, Key: f.Key}))},
			[]string{missing, "tls.ca_file"}},
		{"raylet port in use", nil, []string{"--raylet-port", busyPort},
			[]string{"127.0.0.1:" + busyPort, "--raylet-port"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := shortTempDir(t)
			stopOnCleanup(t, dir)
			args := append([]string{"start", "--head", "--port", strconv.Itoa(freePort(t)), "--temp-dir", dir, "--dashboard-port", "-1"}, c.args...)
			wantFailure(t, c.name, runGorayEnv(t, ctx, c.env, args...), c.want...)
		})
	}
}

// TestTLSClientPlainServer: a node, a command and a driver with TLS
// settings against a head without TLS each fail saying TLS is the problem
// and that the server does not speak it.
func TestTLSClientPlainServer(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := startHead(t, ctx, "--num-cpus", "1")
	certs := shortTempDir(t)
	if r := runGoray(t, ctx, "cert", "ca", "--dir", certs); r.code != 0 {
		t.Fatalf("goray cert ca: %s", r)
	}
	f := tlsFiles(t, ctx, certs, "node1", "127.0.0.1")
	const want = "this process speaks TLS and the server at "

	nodeDir := shortTempDir(t)
	stopOnCleanup(t, nodeDir)
	r := runGoray(t, ctx, "start", "--address", h.addr, "--temp-dir", nodeDir, "--node-ip", "127.0.0.2",
		"--config", writeConfig(t, shortTempDir(t), tlsBlock(f)))
	wantFailure(t, "a node with TLS", r, "TLS mismatch", want+h.addr, "tls block")
	r = runGorayEnv(t, ctx, tlsEnv(f), "status", "--address", h.addr, "--temp-dir", shortTempDir(t))
	wantFailure(t, "goray status with TLS", r, "TLS mismatch", want+h.addr)
	j := startJob(t, jobOptions{addr: h.addr, env: tlsEnv(f)}, quickstartBin)
	code, out := j.wait(ctx)
	wantFailure(t, "a driver with TLS", cliResult{code: code, stdout: out}, "TLS mismatch", want+h.addr)
}
