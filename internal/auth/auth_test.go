package auth

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/waitfor"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ---------------------------------------------------------------------------
// helpers

// shortDir is a temp dir short enough for unix socket paths.
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "ga")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// lockedBuffer is an io.Writer the server's goroutines log into while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func bufLogger(buf io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "test", Output: buf, Level: hclog.Trace})
}

func mustNew(t testing.TB, token string, files *TLSFiles) *Credentials {
	t.Helper()
	c, err := New(token, files)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustDisabled(t testing.TB, files *TLSFiles) *Credentials {
	t.Helper()
	c, err := Disabled(files)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeTestFile(t testing.TB, path, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	// WriteFile's mode is subject to the umask (and ignored for an
	// existing file): set it exactly.
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func permOf(t testing.TB, path string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// clearAuthEnv makes the test independent of the environment it runs in:
// every variable FromEnv and FindToken read is empty, and HOME is a new
// temp dir (returned).
func clearAuthEnv(t *testing.T) string {
	t.Helper()
	for _, n := range EnvNames {
		t.Setenv(n, "")
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	return home
}

// ---------------------------------------------------------------------------
// token files

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	const tok = "0123456789abcdef-token"
	tests := []struct {
		name    string
		content string
		mode    fs.FileMode
		dir     bool
		missing bool
		want    string
		wantErr string // substring; "" means success
		check   func(t *testing.T, path string, err error)
	}{
		{name: "owner only", content: tok + "\n", mode: 0o600, want: tok},
		{name: "read-only owner", content: tok, mode: 0o400, want: tok},
		{name: "surrounding space trimmed", content: "  \n" + tok + " \r\n\n", mode: 0o600, want: tok},
		{name: "world readable", content: tok, mode: 0o644, wantErr: "permissions 0644",
			check: func(t *testing.T, path string, err error) {
				var ie *InsecureFileError
				if !errors.As(err, &ie) {
					t.Fatalf("error %T %v, want *InsecureFileError", err, err)
				}
				if ie.Path != path || ie.Mode != 0o644 {
					t.Errorf("InsecureFileError{%q, %#o}, want {%q, 0644}", ie.Path, ie.Mode, path)
				}
				if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "chmod 600 "+path) {
					t.Errorf("message does not name the path and the fix: %v", err)
				}
			}},
		{name: "group readable", content: tok, mode: 0o640, wantErr: "chmod 600"},
		{name: "group writable only", content: tok, mode: 0o620, wantErr: "chmod 600"},
		{name: "other writable only", content: tok, mode: 0o602, wantErr: "chmod 600"},
		{name: "empty", content: "", mode: 0o600, wantErr: "is empty"},
		{name: "only whitespace", content: " \n\t\n", mode: 0o600, wantErr: "is empty"},
		{name: "oversized", content: strings.Repeat("a", maxTokenLen+1), mode: 0o600, wantErr: "larger than 4096 bytes"},
		{name: "largest allowed", content: strings.Repeat("b", maxTokenLen), mode: 0o600, want: strings.Repeat("b", maxTokenLen)},
		{name: "control character", content: "abc\x01def", mode: 0o600, wantErr: "printable ASCII"},
		{name: "inner space", content: "abc def", mode: 0o600, wantErr: "printable ASCII"},
		{name: "non-ASCII", content: "tökén", mode: 0o600, wantErr: "printable ASCII"},
		{name: "directory", dir: true, wantErr: "is a directory"},
		{name: "missing", missing: true, wantErr: "reading the token file",
			check: func(t *testing.T, path string, err error) {
				if !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("error %v is not fs.ErrNotExist", err)
				}
			}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("token-%d", i))
			switch {
			case tt.dir:
				if err := os.Mkdir(path, 0o700); err != nil {
					t.Fatal(err)
				}
			case tt.missing:
			default:
				writeTestFile(t, path, tt.content, tt.mode)
			}
			got, err := ReadTokenFile(path)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("ReadTokenFile = %.40q, %v; want %.40q", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ReadTokenFile = %.40q, want an error with %q", got, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q lacks %q", err, tt.wantErr)
			}
			if !tt.missing && !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			if got != "" {
				t.Errorf("token %q returned with an error", got)
			}
			if tt.check != nil {
				tt.check(t, path, err)
			}
		})
	}
}

func TestLoadOrCreateToken(t *testing.T) {
	base := t.TempDir()
	path := filepath.Join(base, "new", "sub", "auth_token")

	tok, created, err := LoadOrCreateToken(path)
	if err != nil || !created {
		t.Fatalf("LoadOrCreateToken = %q, %v, %v; want a new token", tok, created, err)
	}
	if len(tok) != 64 || checkTokenText(tok) != nil {
		t.Errorf("generated token %q: want 64 printable characters", tok)
	}
	if p := permOf(t, path); p != 0o600 {
		t.Errorf("token file mode %#o, want 0600", p)
	}
	for _, d := range []string{filepath.Join(base, "new"), filepath.Dir(path)} {
		if p := permOf(t, d); p != 0o700 {
			t.Errorf("directory %s mode %#o, want 0700", d, p)
		}
	}
	if got, err := ReadTokenFile(path); err != nil || got != tok {
		t.Errorf("file holds %q, %v; want %q", got, err, tok)
	}

	again, created, err := LoadOrCreateToken(path)
	if err != nil || created || again != tok {
		t.Errorf("second LoadOrCreateToken = %q, %v, %v; want the same token, not created", again, created, err)
	}
	assertNoTempFiles(t, filepath.Dir(path))

	// An insecure existing file is refused, not replaced.
	bad := filepath.Join(base, "bad_token")
	writeTestFile(t, bad, "sometoken", 0o644)
	var ie *InsecureFileError
	if _, _, err := LoadOrCreateToken(bad); !errors.As(err, &ie) {
		t.Errorf("LoadOrCreateToken on a 0644 file: %v, want *InsecureFileError", err)
	}
	if b, _ := os.ReadFile(bad); string(b) != "sometoken" {
		t.Errorf("insecure file was rewritten: %q", b)
	}

	if GenerateToken() == GenerateToken() {
		t.Error("GenerateToken returned the same token twice")
	}
}

func assertNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".auth_token-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func TestLoadOrCreateTokenRace(t *testing.T) {
	leaktest.Goroutines(t)
	for round := range 5 {
		path := filepath.Join(t.TempDir(), "d", "auth_token")
		const n = 16
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			tokens  [n]string
			errs    [n]error
			created atomic.Int32
		)
		for i := range n {
			wg.Go(func() {
				<-start
				tok, c, err := LoadOrCreateToken(path)
				tokens[i], errs[i] = tok, err
				if c {
					created.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d goroutine %d: %v", round, i, errs[i])
			}
			if tokens[i] != tokens[0] {
				t.Fatalf("round %d: goroutines got different tokens %q and %q", round, tokens[0], tokens[i])
			}
		}
		if c := created.Load(); c != 1 {
			t.Errorf("round %d: %d callers report created, want exactly 1", round, c)
		}
		if got, err := ReadTokenFile(path); err != nil || got != tokens[0] {
			t.Errorf("round %d: file holds %q, %v; want %q", round, got, err, tokens[0])
		}
		assertNoTempFiles(t, filepath.Dir(path))
	}
}

func TestFindToken(t *testing.T) {
	const envTok, pathTok, defTok = "token-from-env", "token-from-path", "token-from-default"
	tests := []struct {
		name       string
		env        string // $GORAY_AUTH_TOKEN
		path       string // $GORAY_AUTH_TOKEN_PATH: "file", "missing" or ""
		def        bool   // the default file exists
		defMode    fs.FileMode
		want       string
		wantFrom   string // "$", "path", "default" or ""
		wantErr    string
		errNotExst bool
	}{
		{name: "env over path and default", env: envTok, path: "file", def: true, want: envTok, wantFrom: "$"},
		{name: "env with a missing explicit path", env: envTok, path: "missing", want: envTok, wantFrom: "$"},
		{name: "env trimmed", env: "  " + envTok + "\n", want: envTok, wantFrom: "$"},
		{name: "blank env falls through", env: "   ", path: "file", want: pathTok, wantFrom: "path"},
		{name: "path over default", path: "file", def: true, want: pathTok, wantFrom: "path"},
		{name: "default", def: true, want: defTok, wantFrom: "default"},
		{name: "nothing anywhere", want: "", wantFrom: ""},
		{name: "explicit path missing", path: "missing", def: true, wantErr: "reading the token file", errNotExst: true},
		{name: "bad env token", env: "has space", def: true, wantErr: "$" + EnvToken},
		{name: "insecure default", def: true, defMode: 0o644, wantErr: "chmod 600"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home := clearAuthEnv(t)
			defPath := filepath.Join(home, ".goray", "auth_token")
			if got := DefaultTokenPath(); got != defPath {
				t.Fatalf("DefaultTokenPath = %q, want %q", got, defPath)
			}
			if tt.def {
				if err := os.MkdirAll(filepath.Dir(defPath), 0o700); err != nil {
					t.Fatal(err)
				}
				mode := tt.defMode
				if mode == 0 {
					mode = 0o600
				}
				writeTestFile(t, defPath, defTok+"\n", mode)
			}
			explicit := filepath.Join(t.TempDir(), "explicit_token")
			switch tt.path {
			case "file":
				writeTestFile(t, explicit, pathTok, 0o600)
				t.Setenv(EnvTokenPath, explicit)
			case "missing":
				t.Setenv(EnvTokenPath, explicit)
			}
			if tt.env != "" {
				t.Setenv(EnvToken, tt.env)
			}
			wantTokenPath := defPath
			if tt.path != "" {
				wantTokenPath = explicit
			}
			if got := TokenPath(); got != wantTokenPath {
				t.Errorf("TokenPath = %q, want %q", got, wantTokenPath)
			}

			tok, from, err := FindToken()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("FindToken = %q, %q, %v; want an error with %q", tok, from, err, tt.wantErr)
				}
				if tt.errNotExst && !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("error %v is not fs.ErrNotExist", err)
				}
				if tt.env != "" && strings.Contains(err.Error(), strings.TrimSpace(tt.env)) {
					t.Errorf("error %q repeats the token", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantFrom := map[string]string{"$": "$" + EnvToken, "path": explicit, "default": defPath, "": ""}[tt.wantFrom]
			if tok != tt.want || from != wantFrom {
				t.Errorf("FindToken = %q from %q, want %q from %q", tok, from, tt.want, wantFrom)
			}
		})
	}
}

func TestNewRefusesBadTokens(t *testing.T) {
	for _, tok := range []string{"", "  \n", "two words", "tab\there", "nul\x00", strings.Repeat("x", maxTokenLen+1)} {
		if c, err := New(tok, nil); err == nil {
			t.Errorf("New(%.20q) = %v, want an error", tok, c.Token())
		}
	}
	c := mustNew(t, "  padded-token\n", nil)
	if c.Token() != "padded-token" || !c.Enabled() {
		t.Errorf("New trims: token %q enabled %v", c.Token(), c.Enabled())
	}
	var nilCreds *Credentials
	if nilCreds.Enabled() || nilCreds.TLS() || nilCreds.Token() != "" || nilCreds.TLSFiles() != nil {
		t.Error("a nil *Credentials claims a token or TLS")
	}
}

// ---------------------------------------------------------------------------
// FromEnv

func TestFromEnv(t *testing.T) {
	pki := newPKI(t)
	tests := []struct {
		name        string
		env         map[string]string
		wantErr     []string // substrings of the error
		notInErr    []string
		wantEnabled bool
		wantToken   string
		wantTLS     bool
	}{
		{name: "nothing set", env: nil},
		{name: "token", env: map[string]string{EnvToken: "tok-1"}, wantEnabled: true, wantToken: "tok-1"},
		{name: "explicit token mode", env: map[string]string{EnvToken: "tok-1", EnvMode: "Token"}, wantEnabled: true, wantToken: "tok-1"},
		{name: "disabled despite a token", env: map[string]string{EnvToken: "tok-1", EnvMode: "disabled"}},
		{name: "disabled any case", env: map[string]string{EnvToken: "tok-1", EnvMode: "DISABLED"}},
		{name: "disabled with TLS", env: map[string]string{EnvMode: "disabled", EnvTLSCA: pki.ca1, EnvTLSCert: pki.n1.Cert, EnvTLSKey: pki.n1.Key}, wantTLS: true},
		{name: "bad mode", env: map[string]string{EnvToken: "tok-1", EnvMode: "off"},
			wantErr: []string{EnvMode, `"off"`, ModeToken, ModeDisabled}},
		{name: "bad token", env: map[string]string{EnvToken: "bad token"}, wantErr: []string{EnvToken, "printable"}},
		{name: "token and TLS", env: map[string]string{EnvToken: "tok-2", EnvTLSCA: pki.ca1, EnvTLSCert: pki.n1.Cert, EnvTLSKey: pki.n1.Key},
			wantEnabled: true, wantToken: "tok-2", wantTLS: true},
		{name: "only the CA", env: map[string]string{EnvToken: "tok-1", EnvTLSCA: pki.ca1},
			wantErr: []string{EnvTLSCert, EnvTLSKey}, notInErr: []string{"[" + EnvTLSCA, " " + EnvTLSCA + "]"}},
		{name: "CA and key, no cert", env: map[string]string{EnvTLSCA: pki.ca1, EnvTLSKey: pki.n1.Key},
			wantErr: []string{"[" + EnvTLSCert + "] not set"}},
		{name: "only the key", env: map[string]string{EnvTLSKey: pki.n1.Key}, wantErr: []string{EnvTLSCA, EnvTLSCert, "not set"}},
		{name: "TLS files missing", env: map[string]string{EnvTLSCA: pki.ca1 + ".missing", EnvTLSCert: pki.n1.Cert, EnvTLSKey: pki.n1.Key},
			wantErr: []string{"CA certificate", "no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearAuthEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := FromEnv()
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("FromEnv succeeded (enabled %v), want an error", c.Enabled())
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
				for _, s := range tt.notInErr {
					if strings.Contains(err.Error(), s) {
						t.Errorf("error %q names %q as missing", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Enabled() != tt.wantEnabled || c.Token() != tt.wantToken || c.TLS() != tt.wantTLS {
				t.Errorf("enabled %v token %q TLS %v; want %v %q %v", c.Enabled(), c.Token(), c.TLS(), tt.wantEnabled, tt.wantToken, tt.wantTLS)
			}

			// Env hands the same credentials to a child's FromEnv.
			env := c.Env()
			clearAuthEnv(t)
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			c2, err := FromEnv()
			if err != nil {
				t.Fatalf("FromEnv from Env() %q: %v", env, err)
			}
			if c2.Enabled() != c.Enabled() || c2.Token() != c.Token() || c2.TLS() != c.TLS() {
				t.Errorf("through Env: enabled %v token %q TLS %v; want %v %q %v", c2.Enabled(), c2.Token(), c2.TLS(), c.Enabled(), c.Token(), c.TLS())
			}
			if c.TLS() && *c2.TLSFiles() != *c.TLSFiles() {
				t.Errorf("TLS files through Env %+v, want %+v", *c2.TLSFiles(), *c.TLSFiles())
			}
		})
	}
}

func TestFromEnvTokenFile(t *testing.T) {
	home := clearAuthEnv(t)
	def := filepath.Join(home, ".goray", "auth_token")
	if _, _, err := LoadOrCreateToken(def); err != nil {
		t.Fatal(err)
	}
	want, _ := ReadTokenFile(def)
	c, err := FromEnv()
	if err != nil || c.Token() != want {
		t.Fatalf("FromEnv with the default file: token %q, %v; want %q", c.Token(), err, want)
	}
	// A file that names a missing token path is an error, not "no token".
	t.Setenv(EnvTokenPath, filepath.Join(home, "nope"))
	if _, err := FromEnv(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("FromEnv with a missing $%s: %v, want fs.ErrNotExist", EnvTokenPath, err)
	}
}

// ---------------------------------------------------------------------------
// certificates

// pki is a cluster CA with two node certificates, and a second CA with one.
type pki struct {
	dir1, dir2 string
	ca1, ca2   string
	n1, n2     *TLSFiles // signed by CA 1
	other      *TLSFiles // CA 2 and its certificate
	mixed      *TLSFiles // trusts CA 1, presents CA 2's certificate
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	base := t.TempDir()
	p := &pki{dir1: filepath.Join(base, "ca1"), dir2: filepath.Join(base, "ca2")}
	for _, d := range []string{p.dir1, p.dir2} {
		if err := CreateCA(d, "", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	p.ca1, p.ca2 = filepath.Join(p.dir1, CAFile), filepath.Join(p.dir2, CAFile)
	issue := func(caDir, ca, name string) *TLSFiles {
		cert, key, err := IssueCert(caDir, caDir, name, []string{"127.0.0.1", "localhost"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return &TLSFiles{CA: ca, Cert: cert, Key: key}
	}
	p.n1 = issue(p.dir1, p.ca1, "n1")
	p.n2 = issue(p.dir1, p.ca1, "n2")
	p.other = issue(p.dir2, p.ca2, "x1")
	p.mixed = &TLSFiles{CA: p.ca1, Cert: p.other.Cert, Key: p.other.Key}
	return p
}

func readCert(t testing.TB, path string) *x509.Certificate {
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

func TestCreateCAAndIssueCert(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "certs", "ca")
	if err := CreateCA(dir, "test CA", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if p := permOf(t, dir); p != 0o700 {
		t.Errorf("CA dir mode %#o, want 0700", p)
	}
	if p := permOf(t, filepath.Join(dir, CAKeyFile)); p != 0o600 {
		t.Errorf("CA key mode %#o, want 0600", p)
	}
	ca := readCert(t, filepath.Join(dir, CAFile))
	if !ca.IsCA || ca.Subject.CommonName != "test CA" || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA certificate: IsCA %v CN %q usage %v", ca.IsCA, ca.Subject.CommonName, ca.KeyUsage)
	}
	if d := time.Until(ca.NotAfter); d < 23*time.Hour || d > 25*time.Hour {
		t.Errorf("CA valid for %v, want about 24h", d)
	}

	before, _ := os.ReadFile(filepath.Join(dir, CAKeyFile))
	err := CreateCA(dir, "", time.Hour)
	if err == nil || !strings.Contains(err.Error(), "already exists") || !strings.Contains(err.Error(), dir) {
		t.Errorf("second CreateCA: %v, want a refusal naming the file", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, CAKeyFile)); !bytes.Equal(before, after) {
		t.Error("second CreateCA changed the CA key")
	}

	out := filepath.Join(base, "node-out")
	certPath, keyPath, err := IssueCert(dir, out, "node1", []string{"127.0.0.2", "node1.example", ""}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if certPath != filepath.Join(out, "node1.pem") || keyPath != filepath.Join(out, "node1-key.pem") {
		t.Errorf("paths %s %s", certPath, keyPath)
	}
	if p := permOf(t, keyPath); p != 0o600 {
		t.Errorf("node key mode %#o, want 0600", p)
	}
	if p := permOf(t, out); p != 0o700 {
		t.Errorf("out dir mode %#o, want 0700", p)
	}
	leaf := readCert(t, certPath)
	if leaf.IsCA || leaf.Subject.CommonName != "node1" {
		t.Errorf("leaf: IsCA %v CN %q", leaf.IsCA, leaf.Subject.CommonName)
	}
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.2")) {
		t.Errorf("leaf IPs %v, want [127.0.0.2]", leaf.IPAddresses)
	}
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "node1.example" {
		t.Errorf("leaf DNS names %v, want [node1.example]", leaf.DNSNames)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			t.Errorf("leaf does not verify for usage %v: %v", u, err)
		}
	}
	if _, err := tls.LoadX509KeyPair(certPath, keyPath); err != nil {
		t.Errorf("issued pair does not load: %v", err)
	}

	// Issuing the same name again refuses to overwrite.
	if _, _, err := IssueCert(dir, out, "node1", nil, time.Hour); err == nil {
		t.Error("IssueCert overwrote node1")
	}
	if _, _, err := IssueCert(dir, out, "", nil, time.Hour); err == nil || !strings.Contains(err.Error(), "name") {
		t.Errorf("IssueCert without a name: %v", err)
	}
	if _, _, err := IssueCert(filepath.Join(base, "no-ca"), out, "n", nil, time.Hour); err == nil || !strings.Contains(err.Error(), "goray cert ca") {
		t.Errorf("IssueCert without a CA: %v, want a hint at `goray cert ca`", err)
	}
}

func TestTLSFilesRefused(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose-key.pem")
	b, err := os.ReadFile(p.n1.Key)
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, loose, string(b), 0o644)
	notPEM := filepath.Join(dir, "ca.txt")
	writeTestFile(t, notPEM, "not a certificate", 0o644)

	tests := []struct {
		name    string
		files   TLSFiles
		wantErr string
	}{
		{name: "key readable by others", files: TLSFiles{CA: p.ca1, Cert: p.n1.Cert, Key: loose}, wantErr: "chmod 600 " + loose},
		{name: "CA missing", files: TLSFiles{CA: filepath.Join(dir, "nope.pem"), Cert: p.n1.Cert, Key: p.n1.Key}, wantErr: "reading the CA certificate"},
		{name: "CA not PEM", files: TLSFiles{CA: notPEM, Cert: p.n1.Cert, Key: p.n1.Key}, wantErr: "holds no PEM certificate"},
		{name: "key of another certificate", files: TLSFiles{CA: p.ca1, Cert: p.n1.Cert, Key: p.n2.Key}, wantErr: "loading"},
		{name: "cert missing", files: TLSFiles{CA: p.ca1, Cert: filepath.Join(dir, "nope.pem"), Key: p.n1.Key}, wantErr: "loading"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, mk := range []func() (*Credentials, error){
				func() (*Credentials, error) { return New("tok", &tt.files) },
				func() (*Credentials, error) { return Disabled(&tt.files) },
			} {
				_, err := mk()
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want one with %q", err, tt.wantErr)
				}
			}
		})
	}
	var ie *InsecureFileError
	if _, err := New("tok", &tests[0].files); !errors.As(err, &ie) || ie.Path != loose || ie.Mode != 0o644 {
		t.Errorf("loose key: %v, want *InsecureFileError for %s", err, loose)
	} else if !strings.Contains(err.Error(), "TLS key") {
		t.Errorf("loose key: %q does not say a key is exposed", err)
	}
}

// ---------------------------------------------------------------------------
// gRPC

const echoService = "goray.authtest.Echo"

// echoServer is a hand-made gRPC service: Unary echoes its request (and
// panics on "panic"), Stream echoes every message (and panics on "panic").
// Replies end with the call's security: "tls" or "insecure" (no TLS: every
// goray server has transport credentials, which carry the connection for
// the token check to mark).
type echoServer struct {
	calls atomic.Int64 // handler runs
}

func authType(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.AuthInfo != nil {
		return p.AuthInfo.AuthType()
	}
	return "none"
}

func (e *echoServer) echo(ctx context.Context, in string) string {
	e.calls.Add(1)
	if in == "panic" {
		panic("deliberate test panic")
	}
	return in + "|" + authType(ctx)
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: echoService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return wrapperspb.String(srv.(*echoServer).echo(ctx, req.(*wrapperspb.StringValue).GetValue())), nil
			}
			if interceptor == nil {
				return h(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + echoService + "/Unary"}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Stream",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			for {
				in := new(wrapperspb.StringValue)
				if err := ss.RecvMsg(in); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
				if err := ss.SendMsg(wrapperspb.String(srv.(*echoServer).echo(ss.Context(), in.GetValue()))); err != nil {
					return err
				}
			}
		},
	}},
}

// countingHealth is the standard health service, counting Check calls.
type countingHealth struct {
	*health.Server
	checks atomic.Int64
}

func (h *countingHealth) Check(ctx context.Context, req *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	h.checks.Add(1)
	return h.Server.Check(ctx, req)
}

// testServer is a real gRPC server with creds' options on a loopback TCP
// port and a unix socket.
type testServer struct {
	tcp, unix string // dial targets
	echo      *echoServer
	health    *countingHealth
}

func startServer(t testing.TB, creds *Credentials) *testServer {
	t.Helper()
	s := grpc.NewServer(creds.ServerOptions()...)
	ts := &testServer{echo: &echoServer{}, health: &countingHealth{Server: health.NewServer()}}
	s.RegisterService(&echoDesc, ts.echo)
	grpc_health_v1.RegisterHealthServer(s, ts.health)

	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(shortDir(t), "s.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		tl.Close()
		t.Fatal(err)
	}
	ts.tcp, ts.unix = tl.Addr().String(), "unix://"+sock
	var wg sync.WaitGroup
	for _, l := range []net.Listener{tl, ul} {
		wg.Go(func() { _ = s.Serve(l) })
	}
	t.Cleanup(func() {
		s.Stop()
		wg.Wait()
		if _, err := os.Stat(sock); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("socket %s left behind: %v", sock, err)
		}
	})
	return ts
}

func dial(t testing.TB, target string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func callCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	t.Cleanup(cancel)
	return ctx
}

func unary(ctx context.Context, cc *grpc.ClientConn, msg string) (string, error) {
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, "/"+echoService+"/Unary", wrapperspb.String(msg), out)
	return out.GetValue(), err
}

func stream(ctx context.Context, cc *grpc.ClientConn, msgs ...string) ([]string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := cc.NewStream(ctx, &echoDesc.Streams[0], "/"+echoService+"/Stream")
	if err != nil {
		return nil, err
	}
	var got []string
	for _, m := range msgs {
		if err := st.SendMsg(wrapperspb.String(m)); err != nil && err != io.EOF {
			return got, err
		}
		out := new(wrapperspb.StringValue)
		if err := st.RecvMsg(out); err != nil {
			return got, err
		}
		got = append(got, out.GetValue())
	}
	if err := st.CloseSend(); err != nil {
		return got, err
	}
	if err := st.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
		return got, err
	}
	return got, nil
}

// bearer dial options: a raw "authorization" header, for malformed tokens.
type rawHeader map[string]string

func (h rawHeader) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return h, nil
}
func (rawHeader) RequireTransportSecurity() bool { return false }

func TestGRPCToken(t *testing.T) {
	leaktest.Goroutines(t)
	const token, wrongToken = "the-right-token-0123", "a-wrong-token-4567"
	logBuf := &lockedBuffer{}
	srvCreds := mustNew(t, token, nil)
	srvCreds.SetLogger(bufLogger(logBuf))
	ts := startServer(t, srvCreds)
	ctx := callCtx(t)

	none := mustDisabled(t, nil)
	wrong := mustNew(t, wrongToken, nil)
	right := mustNew(t, token, nil)
	// withHeader is a plain transport with a raw authorization header.
	withHeader := func(v string) func(string) []grpc.DialOption {
		return func(target string) []grpc.DialOption {
			return append(none.DialOptions(target), grpc.WithPerRPCCredentials(rawHeader{"authorization": v}))
		}
	}

	tests := []struct {
		name string
		opts func(target string) []grpc.DialOption
		ok   bool
	}{
		{name: "no token", opts: none.DialOptions},
		{name: "wrong token", opts: wrong.DialOptions},
		{name: "right token", opts: right.DialOptions, ok: true},
		{name: "token without Bearer", ok: false, opts: withHeader(token)},
		{name: "lower-case bearer", ok: false, opts: withHeader("bearer " + token)},
		{name: "token prefix", ok: false, opts: withHeader("Bearer " + token[:len(token)-1])},
		{name: "token with suffix", ok: false, opts: withHeader("Bearer " + token + "x")},
	}
	for _, tt := range tests {
		for _, target := range []string{ts.tcp, ts.unix} {
			network := "tcp"
			if strings.HasPrefix(target, "unix:") {
				network = "unix"
			}
			t.Run(tt.name+"/"+network, func(t *testing.T) {
				cc := dial(t, target, tt.opts(target)...)
				echoBefore, healthBefore := ts.echo.calls.Load(), ts.health.checks.Load()

				got, uerr := unary(ctx, cc, "hello")
				sgot, serr := stream(ctx, cc, "a", "b")
				hresp, herr := grpc_health_v1.NewHealthClient(cc).Check(ctx, &grpc_health_v1.HealthCheckRequest{})

				if tt.ok {
					if uerr != nil || got != "hello|insecure" {
						t.Errorf("unary = %q, %v; want hello|insecure", got, uerr)
					}
					if serr != nil || strings.Join(sgot, ",") != "a|insecure,b|insecure" {
						t.Errorf("stream = %q, %v", sgot, serr)
					}
					if herr != nil || hresp.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
						t.Errorf("health = %v, %v; want SERVING", hresp, herr)
					}
					if n := ts.echo.calls.Load() - echoBefore; n != 3 {
						t.Errorf("echo handler ran %d times, want 3", n)
					}
					return
				}
				for what, err := range map[string]error{"unary": uerr, "stream": serr, "health": herr} {
					if status.Code(err) != codes.Unauthenticated {
						t.Errorf("%s: %v, want Unauthenticated", what, err)
						continue
					}
					msg := status.Convert(err).Message()
					if !strings.Contains(msg, EnvToken) || !strings.Contains(msg, EnvTokenPath) {
						t.Errorf("%s: message %q does not say where the token goes", what, msg)
					}
					if strings.Contains(msg, token) || strings.Contains(msg, wrongToken) {
						t.Errorf("%s: message %q carries a token", what, msg)
					}
				}
				if n := ts.echo.calls.Load() - echoBefore; n != 0 {
					t.Errorf("echo handler ran %d times for refused calls", n)
				}
				if n := ts.health.checks.Load() - healthBefore; n != 0 {
					t.Errorf("health handler ran %d times for refused calls", n)
				}
			})
		}
	}

	// Refusals are logged once per peer (all TCP callers here are
	// 127.0.0.1, all unix callers "unix socket"), and never with a token.
	log := logBuf.String()
	if n := strings.Count(log, "refused a caller"); n != 2 {
		t.Errorf("%d refusal lines, want 2 (one per peer):\n%s", n, log)
	}
	for _, want := range []string{"peer=127.0.0.1", `peer="unix socket"`, "/" + echoService + "/"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, token) || strings.Contains(log, wrongToken) || strings.Contains(log, token[:len(token)-1]) {
		t.Errorf("the log carries a token:\n%s", log)
	}
}

func TestGRPCDisabledAcceptsAll(t *testing.T) {
	leaktest.Goroutines(t)
	srv := mustDisabled(t, nil)
	logBuf := &lockedBuffer{}
	srv.SetLogger(bufLogger(logBuf))
	ts := startServer(t, srv)
	ctx := callCtx(t)
	for _, client := range []*Credentials{mustDisabled(t, nil), mustNew(t, "any-token", nil)} {
		for _, target := range []string{ts.tcp, ts.unix} {
			cc := dial(t, target, client.DialOptions(target)...)
			if got, err := unary(ctx, cc, "x"); err != nil || got != "x|insecure" {
				t.Errorf("%s (token %q): %q, %v", target, client.Token(), got, err)
			}
		}
	}
	if ts.echo.calls.Load() != 4 {
		t.Errorf("handler ran %d times, want 4", ts.echo.calls.Load())
	}
	if s := logBuf.String(); s != "" {
		t.Errorf("a server without auth logged:\n%s", s)
	}
}

func TestGRPCPanicRecovered(t *testing.T) {
	leaktest.Goroutines(t)
	logBuf := &lockedBuffer{}
	srv := mustNew(t, "tok", nil)
	srv.SetLogger(bufLogger(logBuf))
	ts := startServer(t, srv)
	ctx := callCtx(t)
	cc := dial(t, ts.unix, srv.DialOptions(ts.unix)...)

	for i := range 3 {
		_, err := unary(ctx, cc, "panic")
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "deliberate test panic") || !strings.Contains(err.Error(), "/Unary") {
			t.Errorf("round %d: unary panic: %v, want Internal naming the call and the panic", i, err)
		}
		if got, err := unary(ctx, cc, "after"); err != nil || got != "after|insecure" {
			t.Errorf("round %d: the next call: %q, %v", i, got, err)
		}
		got, err := stream(ctx, cc, "s1", "panic", "never")
		if status.Code(err) != codes.Internal || len(got) != 1 {
			t.Errorf("round %d: stream panic: %q, %v; want one reply then Internal", i, got, err)
		}
		if got, err := stream(ctx, cc, "s2"); err != nil || len(got) != 1 {
			t.Errorf("round %d: the next stream: %q, %v", i, got, err)
		}
	}
	log := logBuf.String()
	if n := strings.Count(log, "panic in a call handler"); n != 6 {
		t.Errorf("%d panic log lines, want 6:\n%s", n, log)
	}
	if !strings.Contains(log, "auth_test.go") {
		t.Errorf("the panic log lacks the stack:\n%.2000s", log)
	}
	// A server without a logger recovers too.
	srv2 := mustDisabled(t, nil)
	ts2 := startServer(t, srv2)
	cc2 := dial(t, ts2.tcp, srv2.DialOptions(ts2.tcp)...)
	if _, err := unary(ctx, cc2, "panic"); status.Code(err) != codes.Internal {
		t.Errorf("without a logger: %v, want Internal", err)
	}
	if got, err := unary(ctx, cc2, "ok"); err != nil || got != "ok|insecure" {
		t.Errorf("without a logger, the next call: %q, %v", got, err)
	}
}

func TestLogRefusalBounded(t *testing.T) {
	logBuf := &lockedBuffer{}
	c := mustNew(t, "tok", nil)
	c.logRefusal("before-logger", "x", "no token") // no logger: nothing, not remembered
	c.SetLogger(bufLogger(logBuf))
	for i := range DefaultRefusalPeers + 50 {
		c.logRefusal(fmt.Sprintf("10.0.%d.%d", i/256, i%256), "x", "no token")
		c.logRefusal(fmt.Sprintf("10.0.%d.%d", i/256, i%256), "x", "wrong token")
	}
	c.logRefusal("before-logger", "x", "no token")
	log := logBuf.String()
	// One line per remembered peer, one for all the others.
	if n := strings.Count(log, "refused a caller"); n != DefaultRefusalPeers+1 {
		t.Errorf("%d refusal lines, want %d", n, DefaultRefusalPeers+1)
	}
	if n := strings.Count(log, "refusals from more than"); n != 1 {
		t.Errorf("%d overflow lines, want 1", n)
	}
	if strings.Contains(log, "before-logger") {
		t.Error("a peer past the bound was logged")
	}
}

func TestIsUnixTarget(t *testing.T) {
	for target, want := range map[string]bool{
		"unix:///tmp/x.sock": true,
		"unix:rel.sock":      true,
		"/tmp/x.sock":        true,
		"127.0.0.1:7000":     false,
		"dns:///host:7000":   false,
		"host:7000":          false,
	} {
		if got := isUnixTarget(target); got != want {
			t.Errorf("isUnixTarget(%q) = %v, want %v", target, got, want)
		}
	}
}

// ---------------------------------------------------------------------------
// gRPC with TLS

func TestGRPCTLS(t *testing.T) {
	leaktest.Goroutines(t)
	p := newPKI(t)
	const token = "tls-cluster-token"
	logBuf := &lockedBuffer{}
	srv := mustNew(t, token, p.n1)
	srv.SetLogger(bufLogger(logBuf))
	if !srv.TLS() || srv.TLSFiles() != p.n1 {
		t.Fatal("server credentials without TLS")
	}
	ts := startServer(t, srv)
	ctx := callCtx(t)

	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, p.ca1))
	noClientCert := []grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})),
		grpc.WithPerRPCCredentials(tokenCreds{md: map[string]string{header: bearerPrefix + token}}),
	}

	tests := []struct {
		name   string
		target string
		opts   []grpc.DialOption
		want   string     // reply; "" means the call fails
		code   codes.Code // when it fails with a specific code
	}{
		{name: "TCP with TLS and token", target: ts.tcp, opts: mustNew(t, token, p.n2).DialOptions(ts.tcp), want: "hi|tls"},
		{name: "same certificate as the server", target: ts.tcp, opts: mustNew(t, token, p.n1).DialOptions(ts.tcp), want: "hi|tls"},
		{name: "TCP with TLS, wrong token", target: ts.tcp, opts: mustNew(t, "wrong", p.n2).DialOptions(ts.tcp), code: codes.Unauthenticated},
		{name: "TCP with TLS, no token", target: ts.tcp, opts: mustDisabled(t, p.n2).DialOptions(ts.tcp), code: codes.Unauthenticated},
		{name: "other CA", target: ts.tcp, opts: mustNew(t, token, p.other).DialOptions(ts.tcp), code: codes.Unavailable},
		{name: "client certificate from another CA", target: ts.tcp, opts: mustNew(t, token, p.mixed).DialOptions(ts.tcp), code: codes.Unavailable},
		{name: "no client certificate", target: ts.tcp, opts: noClientCert, code: codes.Unavailable},
		{name: "TCP without TLS", target: ts.tcp, opts: mustNew(t, token, nil).DialOptions(ts.tcp), code: codes.Unavailable},
		{name: "unix without TLS", target: ts.unix, opts: mustNew(t, token, nil).DialOptions(ts.unix), want: "hi|insecure"},
		{name: "unix, client has TLS files", target: ts.unix, opts: mustNew(t, token, p.n2).DialOptions(ts.unix), want: "hi|insecure"},
		{name: "unix without token", target: ts.unix, opts: mustDisabled(t, nil).DialOptions(ts.unix), code: codes.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := ts.echo.calls.Load()
			cc := dial(t, tt.target, tt.opts...)
			got, err := unary(ctx, cc, "hi")
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Fatalf("call = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("call succeeded (%q), want it refused", got)
			}
			if status.Code(err) != tt.code {
				t.Errorf("call: %v, want code %v", err, tt.code)
			}
			if n := ts.echo.calls.Load() - before; n != 0 {
				t.Errorf("the handler ran %d times for a refused call", n)
			}
		})
	}
	if log := logBuf.String(); strings.Contains(log, token) {
		t.Errorf("the log carries the token:\n%s", log)
	}
}

// ---------------------------------------------------------------------------
// raw connections

// listen returns a listener on loopback TCP or on a unix socket in a short
// temp dir, closed at cleanup.
func listen(t testing.TB, network string) net.Listener {
	t.Helper()
	var l net.Listener
	var err error
	if network == "unix" {
		l, err = net.Listen("unix", filepath.Join(shortDir(t), "d.sock"))
	} else {
		l, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

type connResult struct {
	conn net.Conn
	err  error
}

// pending is the server side of one accepted connection, run in a
// goroutine.
type pending struct {
	ch  chan connResult
	r   connResult
	got bool
}

// acceptOne runs fn on the next connection l accepts, in a goroutine. A
// failed fn's connection is closed; a successful one is closed at cleanup,
// which also waits for the goroutine.
func acceptOne(t testing.TB, l net.Listener, fn func(net.Conn) (net.Conn, error)) *pending {
	t.Helper()
	p := &pending{ch: make(chan connResult, 1)}
	var wg sync.WaitGroup
	wg.Go(func() {
		c, err := l.Accept()
		if err != nil {
			p.ch <- connResult{err: err}
			return
		}
		sc, err := fn(c)
		if err != nil {
			c.Close()
			sc = nil
		}
		p.ch <- connResult{sc, err}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		if !p.got {
			p.r, p.got = <-p.ch, true
		}
		if p.r.conn != nil {
			p.r.conn.Close()
		}
	})
	return p
}

// wait returns the server's result, failing the test when it does not come.
func (p *pending) wait(t testing.TB) connResult {
	t.Helper()
	if !p.got {
		select {
		case p.r = <-p.ch:
			p.got = true
		case <-time.After(waitfor.Generous):
			t.Fatal("the server's handshake did not return")
		}
	}
	return p.r
}

func dialRaw(t testing.TB, l net.Listener) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, l.Addr().Network(), l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawHandshake runs ServerConn with srv and ClientConn with cli over a new
// connection on network and returns both results.
func rawHandshake(t testing.TB, network string, srv, cli *Credentials) (server, client connResult) {
	t.Helper()
	l := listen(t, network)
	p := acceptOne(t, l, srv.ServerConn)
	raw := dialRaw(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	cc, err := cli.ClientConn(ctx, raw)
	if err != nil {
		raw.Close()
	}
	return p.wait(t), connResult{cc, err}
}

// exchange checks that data flows both ways over an authenticated pair.
func exchange(t testing.TB, server, client net.Conn) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, 4)
		if _, err := io.ReadFull(server, buf); err != nil {
			errc <- err
			return
		}
		if string(buf) != "ping" {
			errc <- fmt.Errorf("server read %q", buf)
			return
		}
		_, err := server.Write([]byte("pong!"))
		errc <- err
	}()
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "pong!" {
		t.Errorf("client read %q, %v", buf, err)
	}
	if err := <-errc; err != nil {
		t.Error(err)
	}
}

func TestRawConnToken(t *testing.T) {
	leaktest.Goroutines(t)
	const token = "raw-conn-token"
	tests := []struct {
		name         string
		srv, cli     *Credentials
		ok           bool
		wantWhy      string // the server error's reason
		wantCliNoTok bool   // the client's error says it has no token
		srvNotAuth   bool   // the client refuses the server (ErrServerNotAuthenticated)
	}{
		{name: "right token", srv: mustNew(t, token, nil), cli: mustNew(t, token, nil), ok: true},
		{name: "wrong token", srv: mustNew(t, token, nil), cli: mustNew(t, "not-"+token, nil), wantWhy: "wrong token"},
		{name: "no token", srv: mustNew(t, token, nil), cli: mustDisabled(t, nil), wantWhy: "no token", wantCliNoTok: true},
		// Anyone can announce that it needs no token: a client with one
		// refuses such a server before sending anything.
		{name: "server disabled, client with token", srv: mustDisabled(t, nil), cli: mustNew(t, token, nil), srvNotAuth: true},
		{name: "both disabled", srv: mustDisabled(t, nil), cli: mustDisabled(t, nil), ok: true},
	}
	for _, tt := range tests {
		for _, network := range []string{"tcp", "unix"} {
			t.Run(tt.name+"/"+network, func(t *testing.T) {
				logBuf := &lockedBuffer{}
				tt.srv.SetLogger(bufLogger(logBuf))
				defer tt.srv.SetLogger(nil)
				s, c := rawHandshake(t, network, tt.srv, tt.cli)
				if tt.ok {
					if s.err != nil || c.err != nil {
						t.Fatalf("server %v, client %v", s.err, c.err)
					}
					if _, isTLS := s.conn.(*tls.Conn); isTLS {
						t.Error("TLS without TLS files")
					}
					exchange(t, s.conn, c.conn)
					return
				}
				if tt.srvNotAuth {
					if !errors.Is(c.err, ErrServerNotAuthenticated) || errors.Is(c.err, ErrRefused) || c.conn != nil {
						t.Errorf("client: %v, want ErrServerNotAuthenticated", c.err)
					}
					if s.err == nil || s.conn != nil {
						t.Errorf("server: %v, want the handshake cut short", s.err)
					}
					return
				}
				if !errors.Is(c.err, ErrRefused) {
					t.Errorf("client: %v, want ErrRefused", c.err)
				}
				if !errors.Is(s.err, ErrRefused) || !strings.Contains(s.err.Error(), tt.wantWhy) {
					t.Errorf("server: %v, want ErrRefused with %q", s.err, tt.wantWhy)
				}
				if tt.wantCliNoTok && !strings.Contains(c.err.Error(), EnvToken) {
					t.Errorf("client error %q does not say where the token goes", c.err)
				}
				if c.conn != nil || s.conn != nil {
					t.Error("a connection returned with an error")
				}
				for _, e := range []error{s.err, c.err} {
					if strings.Contains(e.Error(), token) {
						t.Errorf("error %q carries the token", e)
					}
				}
				log := logBuf.String()
				if !strings.Contains(log, "raw connection") || !strings.Contains(log, tt.wantWhy) || strings.Contains(log, token) {
					t.Errorf("refusal log (want the reason, never the token):\n%s", log)
				}
			})
		}
	}
}

// TestRawConnWire checks the protocol from a hand-written client: the
// server's hello, a fresh nonce every time, the server's proof (under its
// own context, over the client's nonce), and that an answer recorded for
// one nonce is refused for the next (no replay) with no proof sent.
func TestRawConnWire(t *testing.T) {
	leaktest.Goroutines(t)
	const token = "wire-token"
	srv := mustNew(t, token, nil)

	hello := func(c net.Conn, wantMode byte) []byte {
		t.Helper()
		b := make([]byte, helloSize)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		if string(b[:len(connMagic)]) != "GRA2" || b[len(connMagic)] != wantMode {
			t.Fatalf("hello %q: want magic GRA2 and mode %d", b, wantMode)
		}
		return b[len(connMagic)+1:]
	}
	answer := func(c net.Conn, cn, mac []byte) {
		t.Helper()
		if _, err := c.Write(append(append([]byte{}, cn...), mac...)); err != nil {
			t.Fatal(err)
		}
	}

	// A correct answer, by hand: accepted, with the server's proof.
	l := listen(t, "tcp")
	ch := acceptOne(t, l, srv.ServerConn)
	c1 := dialRaw(t, l)
	sn1 := hello(c1, modeToken)
	cn1 := bytes.Repeat([]byte{7}, nonceSize)
	mac1 := connMAC([]byte(token), connClientMACCtx, sn1, cn1)
	answer(c1, cn1, mac1)
	reply := make([]byte, 1+macSize)
	if _, err := io.ReadFull(c1, reply); err != nil {
		t.Fatal(err)
	}
	if reply[0] != 0 {
		t.Fatalf("status %d for the right MAC", reply[0])
	}
	if want := connMAC([]byte(token), connServerMACCtx, cn1, sn1); !bytes.Equal(reply[1:], want) {
		t.Errorf("server proof %x, want %x", reply[1:], want)
	}
	if bytes.Equal(reply[1:], mac1) {
		t.Error("the server's proof equals the client's MAC: one could be reflected as the other")
	}
	if r := ch.wait(t); r.err != nil {
		t.Fatal(r.err)
	}

	// The same answer replayed on a new connection: refused, no proof.
	l2 := listen(t, "tcp")
	ch2 := acceptOne(t, l2, srv.ServerConn)
	c2 := dialRaw(t, l2)
	if sn2 := hello(c2, modeToken); bytes.Equal(sn1, sn2) {
		t.Fatal("two handshakes used the same nonce")
	}
	answer(c2, cn1, mac1)
	if r := ch2.wait(t); !errors.Is(r.err, ErrRefused) {
		t.Errorf("server: %v, want ErrRefused", r.err)
	}
	if rest, err := io.ReadAll(c2); err != nil || !bytes.Equal(rest, []byte{1}) {
		t.Errorf("after a replayed answer the server sent %x, %v; want only status 1 (refused), no proof", rest, err)
	}

	// A server without a token says so in its hello, and proves nothing.
	l3 := listen(t, "tcp")
	ch3 := acceptOne(t, l3, mustDisabled(t, nil).ServerConn)
	c3 := dialRaw(t, l3)
	hello(c3, modeNoToken)
	answer(c3, cn1, make([]byte, macSize))
	r3 := ch3.wait(t)
	if r3.err != nil {
		t.Fatal(r3.err)
	}
	r3.conn.Close()
	if rest, err := io.ReadAll(c3); err != nil || !bytes.Equal(rest, []byte{0}) {
		t.Errorf("a disabled server sent %x, %v; want only status 0", rest, err)
	}
}

// lowerHandshakeTimeout shortens the handshake bound for one test (which
// must not run in parallel with others).
func lowerHandshakeTimeout(t *testing.T, d time.Duration) {
	old := handshakeTimeout
	handshakeTimeout = d
	t.Cleanup(func() { handshakeTimeout = old })
}

func TestRawConnSilentClientDropped(t *testing.T) {
	leaktest.Goroutines(t)
	lowerHandshakeTimeout(t, 300*time.Millisecond)
	p := newPKI(t)
	tests := []struct {
		name    string
		network string
		srv     *Credentials
	}{
		{name: "plain TCP", network: "tcp", srv: mustNew(t, "tok", nil)},
		{name: "unix", network: "unix", srv: mustNew(t, "tok", nil)},
		{name: "TLS", network: "tcp", srv: mustNew(t, "tok", p.n1)},
		{name: "disabled", network: "tcp", srv: mustDisabled(t, nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := listen(t, tt.network)
			ch := acceptOne(t, l, tt.srv.ServerConn)
			c := dialRaw(t, l)
			r := ch.wait(t)
			if r.err == nil {
				t.Fatal("the server accepted a client that said nothing")
			}
			if !errors.Is(r.err, os.ErrDeadlineExceeded) {
				t.Errorf("server: %v, want a deadline error", r.err)
			}
			// The server closed the connection: the client reads EOF
			// (after the hello, when there was one).
			if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, c); err != nil {
				t.Errorf("client: %v, want EOF", err)
			}
		})
	}
}

// TestRawConnClientContext checks that ClientConn returns ctx's error
// promptly when ctx ends during the handshake, against a server that never
// speaks.
func TestRawConnClientContext(t *testing.T) {
	leaktest.Goroutines(t)
	p := newPKI(t)
	tests := []struct {
		name    string
		network string
		cli     *Credentials
		cancel  bool // cancel, else a deadline
	}{
		{name: "cancel", network: "tcp", cli: mustNew(t, "tok", nil), cancel: true},
		{name: "deadline", network: "tcp", cli: mustNew(t, "tok", nil)},
		{name: "deadline unix", network: "unix", cli: mustNew(t, "tok", nil)},
		{name: "cancel TLS", network: "tcp", cli: mustNew(t, "tok", p.n2), cancel: true},
		{name: "deadline TLS", network: "tcp", cli: mustNew(t, "tok", p.n2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := listen(t, tt.network)
			held := make(chan net.Conn, 1)
			var wg sync.WaitGroup
			wg.Go(func() {
				c, err := l.Accept()
				if err == nil {
					held <- c // say nothing
				}
			})
			t.Cleanup(func() {
				l.Close()
				wg.Wait()
				select {
				case c := <-held:
					c.Close()
				default:
				}
			})
			raw := dialRaw(t, l)
			var ctx context.Context
			var cancel context.CancelFunc
			if tt.cancel {
				ctx, cancel = context.WithCancel(context.Background())
			} else {
				ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
			}
			defer cancel()
			done := make(chan connResult, 1)
			start := time.Now()
			go func() {
				c, err := tt.cli.ClientConn(ctx, raw)
				done <- connResult{c, err}
			}()
			if tt.cancel {
				cancel()
			}
			var r connResult
			select {
			case r = <-done:
			case <-time.After(HandshakeTimeout * 2):
				t.Fatal("ClientConn did not return")
			}
			if elapsed := time.Since(start); elapsed >= HandshakeTimeout {
				t.Errorf("ClientConn returned after %v: it waited for the handshake timeout, not for ctx", elapsed)
			}
			if r.err == nil || !errors.Is(r.err, ctx.Err()) {
				t.Errorf("ClientConn: %v, want ctx's error %v", r.err, ctx.Err())
			}
			if r.conn != nil {
				t.Error("a connection returned with an error")
			}
		})
	}
}

// TestRawConnCancelRace cancels the client's ctx at every point of many
// handshakes: ClientConn either fails, or returns a connection that works
// (never one whose deadline the cancellation left in the past).
func TestRawConnCancelRace(t *testing.T) {
	leaktest.Goroutines(t)
	p := newPKI(t)
	for _, files := range []*TLSFiles{nil, p.n1} {
		srv, cli := mustNew(t, "tok", files), mustNew(t, "tok", files)
		l := listen(t, "tcp")
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				wg.Go(func() {
					defer c.Close()
					sc, err := srv.ServerConn(c)
					if err != nil {
						return
					}
					_, _ = io.Copy(sc, sc) // echo until the client closes
				})
			}
		})
		// How long a handshake takes here, to spread the cancellations
		// over it.
		raw := dialRaw(t, l)
		start := time.Now()
		c, err := cli.ClientConn(context.Background(), raw)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		c.Close()
		const rounds = 300
		succeeded := 0
		for i := range rounds {
			raw := dialRaw(t, l)
			ctx, cancel := context.WithCancel(context.Background())
			// Cancel at a point from the start to past the end of the
			// handshake.
			timer := time.AfterFunc(took*time.Duration(i)/rounds*3/2, cancel)
			c, err := cli.ClientConn(ctx, raw)
			if err != nil {
				timer.Stop()
				cancel()
				if !errors.Is(err, context.Canceled) {
					t.Errorf("round %d: %v, want context.Canceled", i, err)
				}
				raw.Close()
				continue
			}
			// Let the cancellation happen, if it has not, before using
			// the connection.
			if timer.Stop() {
				cancel()
			} else {
				<-ctx.Done()
			}
			succeeded++
			if _, err := c.Write([]byte("x")); err != nil {
				t.Fatalf("round %d: ClientConn succeeded but the connection fails: %v", i, err)
			}
			var b [1]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				t.Fatalf("round %d: ClientConn succeeded but the connection fails: %v", i, err)
			}
			c.Close()
		}
		l.Close()
		wg.Wait()
		t.Logf("TLS %v: a handshake takes %v; %d of %d finished before the cancellation", files != nil, took, succeeded, rounds)
	}
}

// TestRawConnOtherProtocol connects ClientConn to servers that speak
// something else.
func TestRawConnOtherProtocol(t *testing.T) {
	leaktest.Goroutines(t)
	tests := []struct {
		name    string
		send    string
		close   bool   // close after sending, else wait for the client
		wantErr string // substring
	}{
		{name: "HTTP response", send: "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", wantErr: "is not a goray data connection"},
		{name: "short banner, then silence", send: "220 ftp\r\n", wantErr: "is not a goray data connection"},
		{name: "newer protocol version", send: "GRA3" + strings.Repeat("\x00", 1+nonceSize), wantErr: `speaks data-connection protocol "GRA3", this process "GRA2"`},
		{name: "older protocol version", send: "GRA1" + strings.Repeat("\x01", 1+nonceSize), wantErr: `speaks data-connection protocol "GRA1", this process "GRA2"`},
		{name: "unknown mode", send: "GRA2\x07" + strings.Repeat("\x00", nonceSize), wantErr: "unknown mode 7"},
		{name: "garbage then close", send: "\xff\xfe\x00garbage", close: true, wantErr: "is not a goray data connection"},
		{name: "nothing then close", send: "", close: true, wantErr: "EOF"},
		{name: "truncated hello", send: connMagic + "\x01abc", close: true, wantErr: "EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := listen(t, "tcp")
			ch := acceptOne(t, l, func(c net.Conn) (net.Conn, error) {
				if _, err := io.WriteString(c, tt.send); err != nil {
					return nil, err
				}
				if tt.close {
					return nil, errors.New("closed by design")
				}
				// Wait for the client to give up (its close), then close.
				_, _ = io.Copy(io.Discard, c)
				return nil, errors.New("client gone")
			})
			raw := dialRaw(t, l)
			ctx, cancel := context.WithTimeout(context.Background(), HandshakeTimeout/2)
			defer cancel()
			c, err := mustNew(t, "tok", nil).ClientConn(ctx, raw)
			raw.Close()
			if err == nil {
				c.Close()
				t.Fatal("handshake with a foreign server succeeded")
			}
			if !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), l.Addr().String()) {
				t.Errorf("error %q, want one naming %s with %q", err, l.Addr(), tt.wantErr)
			}
			if errors.Is(err, ErrRefused) {
				t.Errorf("error %q claims a token refusal", err)
			}
			if ctx.Err() != nil {
				t.Errorf("the client waited for its ctx (%v) to see that the server is no goray server", err)
			}
			ch.wait(t)
		})
	}
}

func TestRawConnTLS(t *testing.T) {
	leaktest.Goroutines(t)
	lowerHandshakeTimeout(t, 2*time.Second) // for a plain client against a TLS server
	p := newPKI(t)
	const token = "tls-raw-token"
	srv := mustNew(t, token, p.n1)
	logBuf := &lockedBuffer{}
	srv.SetLogger(bufLogger(logBuf))
	tests := []struct {
		name    string
		network string
		srv     *Credentials
		cli     *Credentials
		ok      bool
		wantTLS bool
		srvErr  string // substring of the server's error
		cliErr  string // substring of the client's error
	}{
		{name: "TLS and token", network: "tcp", srv: srv, cli: mustNew(t, token, p.n2), ok: true, wantTLS: true},
		{name: "TLS, wrong token", network: "tcp", srv: srv, cli: mustNew(t, "x"+token, p.n2), srvErr: "wrong token", cliErr: "refused"},
		{name: "other CA", network: "tcp", srv: srv, cli: mustNew(t, token, p.other), srvErr: "goray tls", cliErr: "not from this cluster's CA"},
		{name: "client certificate from another CA", network: "tcp", srv: srv, cli: mustNew(t, token, p.mixed), srvErr: "goray tls", cliErr: "tls"},
		// The plain client waits for the server's hello, the TLS server
		// for a ClientHello: both give up at the bound (the client sees
		// its timeout or the server's close).
		{name: "plain client", network: "tcp", srv: srv, cli: mustNew(t, token, nil), srvErr: "goray tls", cliErr: "goray: handshake with"},
		{name: "TLS client, plain server", network: "tcp", srv: mustNew(t, token, nil), cli: mustNew(t, token, p.n2), srvErr: "", cliErr: "goray tls"},
		{name: "unix skips TLS", network: "unix", srv: srv, cli: mustNew(t, token, p.n2), ok: true},
		{name: "unix, plain client", network: "unix", srv: srv, cli: mustNew(t, token, nil), ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c := rawHandshake(t, tt.network, tt.srv, tt.cli)
			if tt.ok {
				if s.err != nil || c.err != nil {
					t.Fatalf("server %v, client %v", s.err, c.err)
				}
				_, sTLS := s.conn.(*tls.Conn)
				_, cTLS := c.conn.(*tls.Conn)
				if sTLS != tt.wantTLS || cTLS != tt.wantTLS {
					t.Errorf("TLS on server %v client %v, want %v", sTLS, cTLS, tt.wantTLS)
				}
				if tt.wantTLS {
					st := s.conn.(*tls.Conn).ConnectionState()
					if len(st.PeerCertificates) == 0 || st.PeerCertificates[0].Subject.CommonName != "n2" {
						t.Errorf("server did not see the client's certificate n2")
					}
				}
				exchange(t, s.conn, c.conn)
				return
			}
			if s.err == nil || c.err == nil {
				t.Fatalf("server %v, client %v; want both to fail", s.err, c.err)
			}
			if !strings.Contains(s.err.Error(), tt.srvErr) {
				t.Errorf("server: %v, want %q", s.err, tt.srvErr)
			}
			if !strings.Contains(c.err.Error(), tt.cliErr) {
				t.Errorf("client: %v, want %q", c.err, tt.cliErr)
			}
		})
	}
	// All TCP peers here are 127.0.0.1: one line for all their refusals.
	if log := logBuf.String(); strings.Contains(log, token) || strings.Count(log, "refused a caller") != 1 {
		t.Errorf("log (want one refusal line, never the token):\n%s", log)
	}
}

// ---------------------------------------------------------------------------
// benchmarks

func benchUnary(b *testing.B, creds *Credentials) {
	leaktest.Goroutines(b)
	ts := startServer(b, creds)
	cc := dial(b, ts.unix, creds.DialOptions(ts.unix)...)
	ctx := context.Background()
	if _, err := unary(ctx, cc, "warm"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := unary(ctx, cc, "x"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnaryCallWithToken is one unary call over a unix socket through
// the token check; compare BenchmarkUnaryCallNoAuth for its overhead.
func BenchmarkUnaryCallWithToken(b *testing.B) {
	c, err := New(GenerateToken(), nil)
	if err != nil {
		b.Fatal(err)
	}
	benchUnary(b, c)
}

// BenchmarkUnaryCallNoAuth is the same call with authentication disabled.
func BenchmarkUnaryCallNoAuth(b *testing.B) {
	c, err := Disabled(nil)
	if err != nil {
		b.Fatal(err)
	}
	benchUnary(b, c)
}

// BenchmarkRawHandshake is one raw-connection handshake over a unix socket.
func BenchmarkRawHandshake(b *testing.B) {
	leaktest.Goroutines(b)
	c, err := New(GenerateToken(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	l := listen(b, "unix")
	ctx := context.Background()
	for b.Loop() {
		ch := make(chan error, 1)
		go func() {
			sc, err := l.Accept()
			if err == nil {
				_, err = c.ServerConn(sc)
				sc.Close()
			}
			ch <- err
		}()
		raw, err := net.Dial("unix", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.ClientConn(ctx, raw); err != nil {
			b.Fatal(err)
		}
		raw.Close()
		if err := <-ch; err != nil {
			b.Fatal(err)
		}
	}
}
