package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/internal/auth"
)

// clearAuthEnvForTest empties every variable that configures credentials
// and points HOME at a new temp dir, so that nothing from the machine (or
// TestMain's token path) leaks into a test.
func clearAuthEnvForTest(t *testing.T) string {
	t.Helper()
	for _, n := range auth.EnvNames {
		t.Setenv(n, "")
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	return home
}

func fileMode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func parseCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("%s holds no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// gorayRun runs the command line in-process.
func gorayRun(args ...string) result {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func TestCertCommands(t *testing.T) {
	clearAuthEnvForTest(t)
	base := t.TempDir()
	dir := filepath.Join(base, "pki") // created by `cert ca`
	caPath, caKey := filepath.Join(dir, auth.CAFile), filepath.Join(dir, auth.CAKeyFile)

	r := gorayRun("cert", "ca", "--dir", dir)
	if r.code != exitOK {
		t.Fatalf("cert ca: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, caPath) || !strings.Contains(r.stdout, caKey) {
		t.Errorf("cert ca output does not name the files:\n%s", r.stdout)
	}
	if m := fileMode(t, dir); m != 0o700 {
		t.Errorf("CA dir mode %#o, want 0700", m)
	}
	if m := fileMode(t, caKey); m != 0o600 {
		t.Errorf("CA key mode %#o, want 0600", m)
	}
	ca := parseCertFile(t, caPath)
	if !ca.IsCA {
		t.Error("ca.pem is not a CA certificate")
	}

	r = gorayRun("cert", "issue", "--dir", dir, "--name", "n1", "--host", "127.0.0.2")
	if r.code != exitOK {
		t.Fatalf("cert issue: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	certPath, keyPath := filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem")
	for _, want := range []string{"tls {", `ca_file   = "` + caPath + `"`, `cert_file = "` + certPath + `"`, `key_file  = "` + keyPath + `"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("cert issue output lacks %q:\n%s", want, r.stdout)
		}
	}
	if m := fileMode(t, keyPath); m != 0o600 {
		t.Errorf("node key mode %#o, want 0600", m)
	}
	leaf := parseCertFile(t, certPath)
	if leaf.Subject.CommonName != "n1" || len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.2")) {
		t.Errorf("certificate CN %q IPs %v; want n1 with 127.0.0.2", leaf.Subject.CommonName, leaf.IPAddresses)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			t.Errorf("n1.pem does not verify against the CA for %v: %v", u, err)
		}
	}
	// The files are what a node's tls block takes.
	creds, err := auth.New("tok", &auth.TLSFiles{CA: caPath, Cert: certPath, Key: keyPath})
	if err != nil || !creds.TLS() {
		t.Errorf("credentials from the issued files: %v", err)
	}

	// A second CA in the same directory is refused and changes nothing.
	before, _ := os.ReadFile(caKey)
	beforeCert, _ := os.ReadFile(caPath)
	r = gorayRun("cert", "ca", "--dir", dir)
	if r.code != exitError || !strings.Contains(r.stderr, "already exists") || !strings.Contains(r.stderr, dir) {
		t.Errorf("second cert ca: exit %d, stderr %q; want exit 1 saying the CA exists", r.code, r.stderr)
	}
	after, _ := os.ReadFile(caKey)
	afterCert, _ := os.ReadFile(caPath)
	if !bytes.Equal(before, after) || !bytes.Equal(beforeCert, afterCert) {
		t.Error("the second cert ca changed the CA files")
	}

	// --out puts the pair elsewhere; a name issued twice is refused.
	out := filepath.Join(base, "out")
	if r := gorayRun("cert", "issue", "--dir", dir, "--name", "n2", "--out", out, "--host", "node2.example"); r.code != exitOK {
		t.Errorf("cert issue --out: exit %d\n%s", r.code, r.stderr)
	} else if c := parseCertFile(t, filepath.Join(out, "n2.pem")); len(c.DNSNames) != 1 || c.DNSNames[0] != "node2.example" {
		t.Errorf("n2 DNS names %v", c.DNSNames)
	}
	if r := gorayRun("cert", "issue", "--dir", dir, "--name", "n1"); r.code != exitError {
		t.Errorf("issuing n1 twice: exit %d, want 1\n%s", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(certPath); parseCertFile(t, certPath).SerialNumber.Cmp(leaf.SerialNumber) != 0 || len(b) == 0 {
		t.Error("issuing n1 twice replaced n1.pem")
	}

	for _, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{name: "ca without dir", args: []string{"cert", "ca"}, code: exitUsage, want: `"dir" not set`},
		{name: "issue without name", args: []string{"cert", "issue", "--dir", dir}, code: exitUsage, want: `"name" not set`},
		{name: "issue without a CA", args: []string{"cert", "issue", "--dir", filepath.Join(base, "empty"), "--name", "x"}, code: exitError, want: "goray cert ca"},
		{name: "cert ca with an argument", args: []string{"cert", "ca", "--dir", dir, "extra"}, code: exitUsage, want: "unknown command"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := gorayRun(tt.args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d with %q", r.code, r.stderr, tt.code, tt.want)
			}
		})
	}
}

func TestAuthTokenCommand(t *testing.T) {
	home := clearAuthEnvForTest(t)
	defPath := filepath.Join(home, ".goray", "auth_token")

	// Nothing anywhere: an error that says how to get a token.
	r := gorayRun("auth", "token")
	if r.code != exitError || !strings.Contains(r.stderr, defPath) || !strings.Contains(r.stderr, "--generate") {
		t.Errorf("auth token without a token: exit %d, stderr %q", r.code, r.stderr)
	}

	path := filepath.Join(t.TempDir(), "sub", "auth_token")
	t.Setenv(auth.EnvTokenPath, path)
	r = gorayRun("auth", "token")
	if r.code != exitError || !strings.Contains(r.stderr, path) {
		t.Errorf("auth token with a missing $%s: exit %d, stderr %q; want an error naming the path", auth.EnvTokenPath, r.code, r.stderr)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("auth token without --generate created %s", path)
	}

	r = gorayRun("auth", "token", "--generate")
	if r.code != exitOK {
		t.Fatalf("auth token --generate: exit %d\n%s", r.code, r.stderr)
	}
	tok := strings.TrimSuffix(r.stdout, "\n")
	inFile, err := auth.ReadTokenFile(path)
	if err != nil || inFile != tok || len(tok) != 64 {
		t.Fatalf("printed %q, file holds %q (%v); want the same 64-character token", r.stdout, inFile, err)
	}
	if m := fileMode(t, path); m != 0o600 {
		t.Errorf("token file mode %#o, want 0600", m)
	}
	if _, err := os.Stat(defPath); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("--generate wrote the default path too")
	}
	for _, args := range [][]string{{"auth", "token", "--generate"}, {"auth", "token"}} {
		if r := gorayRun(args...); r.code != exitOK || r.stdout != tok+"\n" {
			t.Errorf("%q again: exit %d, %q; want the same token", args, r.code, r.stdout)
		}
	}
	// The built binary does the same.
	if r := runGoray(t, "auth", "token", "--generate"); r.code != exitOK || r.stdout != tok+"\n" {
		t.Errorf("goray binary: exit %d, %q %q; want the same token", r.code, r.stdout, r.stderr)
	}

	// $GORAY_AUTH_TOKEN is printed, and --generate then writes nothing.
	other := filepath.Join(t.TempDir(), "auth_token")
	t.Setenv(auth.EnvTokenPath, other)
	t.Setenv(auth.EnvToken, "env-token-123")
	if r := gorayRun("auth", "token", "--generate"); r.code != exitOK || r.stdout != "env-token-123\n" {
		t.Errorf("with $%s: exit %d, %q", auth.EnvToken, r.code, r.stdout)
	}
	if _, err := os.Stat(other); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("--generate with $%s set created %s", auth.EnvToken, other)
	}

	// An insecure file is refused with the fix.
	t.Setenv(auth.EnvToken, "")
	if err := os.WriteFile(other, []byte("loose"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(other, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := gorayRun("auth", "token"); r.code != exitError || !strings.Contains(r.stderr, "chmod 600 "+other) || strings.Contains(r.stdout, "loose") {
		t.Errorf("insecure token file: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// startConfig is the configuration `goray start args...` would run with,
// from an HCL file with src when src is not "".
func startConfig(t *testing.T, src string, args ...string) *config.Node {
	t.Helper()
	if src != "" {
		path := filepath.Join(t.TempDir(), "node.hcl")
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", path)
	}
	o, fs := parseStart(t, args...)
	f, err := o.configFlags(fs, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := loadConfig(o.configPath, f)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestNodeCredentials(t *testing.T) {
	pkiDir := t.TempDir()
	if err := auth.CreateCA(pkiDir, "", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	cert, key, err := auth.IssueCert(pkiDir, pkiDir, "node", nil, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(pkiDir, auth.CAFile)
	tlsBlock := "tls {\n  ca_file = \"" + caFile + "\"\n  cert_file = \"" + cert + "\"\n  key_file = \"" + key + "\"\n}\n"

	head := []string{"--head"}
	join := []string{"--address", "127.0.0.1:6380"}

	// Each case runs with a fresh HOME and $GORAY_AUTH_TOKEN_PATH (envPath)
	// that does not exist unless setup makes it.
	tests := []struct {
		name  string
		src   string   // the config file
		args  []string // start flags
		env   map[string]string
		setup func(t *testing.T, envPath string)

		wantErr     []string // substrings; the error also names envPath when nameEnvPath
		nameEnvPath bool
		usage       bool // the error is a usage error
		insecure    bool // the error is an *auth.InsecureFileError

		enabled  bool
		token    string // "" for any
		from     string // "path" (envPath), "config" (the config's token file), or a literal
		created  bool
		tls      bool
		noFileAt bool // envPath must still not exist
	}{
		{name: "head creates the token file", args: head, enabled: true, from: "path", created: true},
		{name: "head reuses the token file", args: head, enabled: true, from: "path",
			setup: func(t *testing.T, p string) { writeToken(t, p, "existing-token", 0o600) }, token: "existing-token"},
		{name: "joining node without the token file", args: join, nameEnvPath: true, noFileAt: true,
			wantErr: []string{"joining a cluster needs its token", "copy the head's token file there", "--auth-token-file", "$GORAY_AUTH_TOKEN"}},
		{name: "joining node with the token file", args: join, enabled: true, from: "path", token: "copied-token",
			setup: func(t *testing.T, p string) { writeToken(t, p, "copied-token", 0o600) }},
		{name: "joining node with an insecure token file", args: join, insecure: true, nameEnvPath: true, wantErr: []string{"chmod 600"},
			setup: func(t *testing.T, p string) { writeToken(t, p, "copied-token", 0o644) }},
		{name: "head with an insecure token file", args: head, insecure: true, wantErr: []string{"chmod 600"},
			setup: func(t *testing.T, p string) { writeToken(t, p, "copied-token", 0o640) }},
		{name: "GORAY_AUTH_MODE=disabled", args: head, env: map[string]string{auth.EnvMode: "disabled"}, noFileAt: true},
		{name: "GORAY_AUTH_MODE=Disabled on a joining node", args: join, env: map[string]string{auth.EnvMode: "Disabled"}, noFileAt: true},
		{name: "GORAY_AUTH_MODE unknown", args: head, env: map[string]string{auth.EnvMode: "maybe"}, usage: true,
			wantErr: []string{auth.EnvMode, `"maybe"`}, noFileAt: true},
		{name: "GORAY_AUTH_TOKEN wins over the file", args: join, env: map[string]string{auth.EnvToken: "env-token"},
			setup:   func(t *testing.T, p string) { writeToken(t, p, "file-token", 0o600) },
			enabled: true, token: "env-token", from: "$" + auth.EnvToken},
		{name: "GORAY_AUTH_TOKEN on a head creates no file", args: head, env: map[string]string{auth.EnvToken: "env-token"},
			enabled: true, token: "env-token", from: "$" + auth.EnvToken, noFileAt: true},
		{name: "bad GORAY_AUTH_TOKEN", args: head, env: map[string]string{auth.EnvToken: "two words"}, wantErr: []string{"printable"}},
		{name: "auth disabled in the config", src: "auth {\n  mode = \"disabled\"\n}\n", args: head, noFileAt: true},
		{name: "GORAY_AUTH_MODE=token over the config's disabled", src: "auth {\n  mode = \"disabled\"\n}\n", args: head,
			env: map[string]string{auth.EnvMode: "token"}, enabled: true, from: "path", created: true},
		{name: "token_file in the config over GORAY_AUTH_TOKEN_PATH", src: "auth {\n  token_file = \"tokens/t\"\n}\n", args: head,
			enabled: true, from: "config", created: true, noFileAt: true},
		{name: "--auth-token-file over GORAY_AUTH_TOKEN_PATH", args: append([]string{"--auth-token-file", "FLAG"}, join...),
			enabled: true, from: "flag", token: "flag-token", noFileAt: true},
		{name: "tls block", src: tlsBlock, args: head, enabled: true, from: "path", created: true, tls: true},
		{name: "tls block with auth disabled", src: tlsBlock + "auth {\n  mode = \"disabled\"\n}\n", args: head, tls: true, noFileAt: true},
		{name: "TLS from the environment", args: head, enabled: true, from: "path", created: true, tls: true,
			env: map[string]string{auth.EnvTLSCA: caFile, auth.EnvTLSCert: cert, auth.EnvTLSKey: key}},
		{name: "partial TLS environment", args: head, env: map[string]string{auth.EnvTLSCA: caFile},
			wantErr: []string{auth.EnvTLSCert, auth.EnvTLSKey, "not set"}, noFileAt: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearAuthEnvForTest(t)
			envPath := filepath.Join(t.TempDir(), "tokdir", "auth_token")
			t.Setenv(auth.EnvTokenPath, envPath)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if tt.setup != nil {
				tt.setup(t, envPath)
			}
			args := tt.args
			flagPath := filepath.Join(t.TempDir(), "flag_token")
			for i, a := range args {
				if a == "FLAG" {
					args = append(append([]string(nil), args[:i]...), append([]string{flagPath}, args[i+1:]...)...)
					writeToken(t, flagPath, "flag-token", 0o600)
				}
			}
			cfg := startConfig(t, tt.src, args...)

			na, err := nodeCredentials(cfg)
			if tt.noFileAt {
				if _, serr := os.Stat(envPath); !errors.Is(serr, fs.ErrNotExist) {
					t.Errorf("%s exists: %v", envPath, serr)
				}
			}
			if tt.wantErr != nil || tt.insecure {
				if err == nil {
					t.Fatalf("nodeCredentials succeeded (enabled %v), want an error", na.creds.Enabled())
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
				if tt.nameEnvPath && !strings.Contains(err.Error(), envPath) {
					t.Errorf("error %q does not name %s", err, envPath)
				}
				var ue *usageError
				if errors.As(err, &ue) != tt.usage {
					t.Errorf("error %T %v: usage error %v, want %v", err, err, !tt.usage, tt.usage)
				}
				var ie *auth.InsecureFileError
				if errors.As(err, &ie) != tt.insecure {
					t.Errorf("error %T %v: insecure file error %v, want %v", err, err, !tt.insecure, tt.insecure)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := na.creds
			if c.Enabled() != tt.enabled || c.TLS() != tt.tls || na.created != tt.created {
				t.Errorf("enabled %v TLS %v created %v; want %v %v %v", c.Enabled(), c.TLS(), na.created, tt.enabled, tt.tls, tt.created)
			}
			if tt.token != "" && c.Token() != tt.token {
				t.Errorf("token %q, want %q", c.Token(), tt.token)
			}
			row, notes := na.describe()
			if !tt.enabled {
				if c.Token() != "" || !strings.HasPrefix(row, "DISABLED") || len(notes) == 0 || !strings.Contains(notes[0], "WARNING") {
					t.Errorf("disabled: token %q, row %q, notes %q", c.Token(), row, notes)
				}
				if tt.tls != strings.Contains(row, "mutual TLS") {
					t.Errorf("row %q, TLS %v", row, tt.tls)
				}
				return
			}
			wantFrom := tt.from
			switch tt.from {
			case "path":
				wantFrom = envPath
			case "config":
				wantFrom = filepath.Join(filepath.Dir(cfg.Filename), "tokens", "t")
			case "flag":
				wantFrom = flagPath
			}
			if na.from != wantFrom {
				t.Errorf("token from %q, want %q", na.from, wantFrom)
			}
			if strings.HasPrefix(wantFrom, "/") {
				inFile, err := auth.ReadTokenFile(wantFrom)
				if err != nil || inFile != c.Token() {
					t.Errorf("%s holds %q (%v), the credentials %q", wantFrom, inFile, err, c.Token())
				}
				if m := fileMode(t, wantFrom); m != 0o600 {
					t.Errorf("%s mode %#o, want 0600", wantFrom, m)
				}
			}
			if !strings.Contains(row, "token from "+wantFrom) || tt.tls != strings.Contains(row, "mutual TLS") {
				t.Errorf("row %q", row)
			}
			if created := len(notes) > 0 && strings.Contains(notes[0], "Generated a new cluster token"); created != tt.created {
				t.Errorf("notes %q, created %v", notes, tt.created)
			}
			if strings.Contains(row+strings.Join(notes, ""), c.Token()) {
				t.Errorf("the start message shows the token: %q %q", row, notes)
			}

			// A second start finds what the first made.
			if tt.created {
				na2, err := nodeCredentials(cfg)
				if err != nil || na2.created || na2.creds.Token() != c.Token() {
					t.Errorf("second start: created %v token %q, %v; want the first token", na2.created, na2.creds.Token(), err)
				}
			}
		})
	}
}

func writeToken(t *testing.T, path, token string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(token+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
