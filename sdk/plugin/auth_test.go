package plugin_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/goray-dev/goray/internal/leaktest"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/plugin"
)

// The plugin's credentials are read from the environment once per process
// (the first AuthenticateServer or AuthenticateClient), so TestMain sets
// them before any test runs: the tests of this process see a plugin whose
// node gave it testToken. Other environments (disabled, a token file, TLS, a
// broken setting) run in a child process: this test binary re-executed with
// childEnv set, which runs authChild instead of the tests.
const (
	childEnv     = "GORAY_TEST_PLUGIN_AUTH_CHILD"
	peerTokenEnv = "GORAY_TEST_PLUGIN_AUTH_PEER_TOKEN"
)

var testToken string

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(authChild())
	}
	for _, n := range auth.EnvNames {
		os.Unsetenv(n)
	}
	testToken = auth.GenerateToken()
	os.Setenv(auth.EnvToken, testToken)
	os.Exit(m.Run())
}

// listen returns a loopback TCP listener or one on a unix socket in a short
// temp dir (socket paths are limited to 107 bytes).
func listen(network string) (net.Listener, func(), error) {
	if network == "unix" {
		dir, err := os.MkdirTemp("", "ga")
		if err != nil {
			return nil, nil, err
		}
		l, err := net.Listen("unix", filepath.Join(dir, "p.sock"))
		if err != nil {
			os.RemoveAll(dir)
			return nil, nil, err
		}
		return l, func() { l.Close(); os.RemoveAll(dir) }, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	return l, func() { l.Close() }, nil
}

type serverSide func(net.Conn) (net.Conn, error)
type clientSide func(context.Context, net.Conn) (net.Conn, error)

// outcome is what one authenticated connection did.
type outcome struct {
	ServerErr, ClientErr error
	TLS                  bool // the server's connection is TLS
}

func (o outcome) String() string {
	if o.ServerErr != nil || o.ClientErr != nil {
		return fmt.Sprintf("server: %v; client: %v", o.ServerErr, o.ClientErr)
	}
	if o.TLS {
		return "ok tls"
	}
	return "ok"
}

// connect runs server on a connection accepted on network and client on
// the dialled end, then checks that data flows both ways. Everything it
// opens is closed when it returns.
func connect(network string, server serverSide, client clientSide) (o outcome, err error) {
	var wg sync.WaitGroup
	defer wg.Wait() // after the listener is closed
	l, cleanup, err := listen(network)
	if err != nil {
		return o, err
	}
	defer cleanup()
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	wg.Go(func() {
		c, err := l.Accept()
		if err != nil {
			ch <- result{err: err}
			return
		}
		sc, err := server(c)
		if err != nil {
			c.Close()
			sc = nil
		}
		ch <- result{sc, err}
	})
	raw, err := net.Dial(l.Addr().Network(), l.Addr().String())
	if err != nil {
		return o, err
	}
	defer raw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	cc, cerr := client(ctx, raw)
	if cerr != nil {
		raw.Close() // so that a server waiting for the client gives up
	}
	s := <-ch
	if s.c != nil {
		defer s.c.Close()
	}
	o = outcome{ServerErr: s.err, ClientErr: cerr}
	if s.err != nil || cerr != nil {
		return o, nil
	}
	_, o.TLS = s.c.(*tls.Conn)
	echoed := make(chan error, 1)
	go func() {
		buf := make([]byte, 4)
		_, err := io.ReadFull(s.c, buf)
		if err == nil {
			_, err = s.c.Write(bytes.ToUpper(buf))
		}
		echoed <- err
	}()
	if _, err := cc.Write([]byte("ping")); err != nil {
		return o, err
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(cc, buf); err != nil || string(buf) != "PING" {
		return o, fmt.Errorf("read %q, %v after the handshake", buf, err)
	}
	return o, <-echoed
}

func mustCreds(t *testing.T, token string) *auth.Credentials {
	t.Helper()
	var c *auth.Credentials
	var err error
	if token == "" {
		c, err = auth.Disabled(nil)
	} else {
		c, err = auth.New(token, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAuthenticateServer has peers with and without the token connect to a
// plugin's listener.
func TestAuthenticateServer(t *testing.T) {
	leaktest.Goroutines(t)
	tests := []struct {
		name  string
		peer  string // the peer's token; "" for none
		ok    bool
		noTok bool
	}{
		{name: "cluster token", peer: testToken, ok: true},
		{name: "wrong token", peer: "not-" + testToken},
		{name: "no token", peer: "", noTok: true},
	}
	for _, tt := range tests {
		for _, network := range []string{"tcp", "unix"} {
			t.Run(tt.name+"/"+network, func(t *testing.T) {
				o, err := connect(network, plugin.AuthenticateServer, mustCreds(t, tt.peer).ClientConn)
				if err != nil {
					t.Fatal(err)
				}
				if tt.ok {
					if o.String() != "ok" {
						t.Errorf("%v, want ok without TLS", o)
					}
					return
				}
				if !errors.Is(o.ServerErr, auth.ErrRefused) || !errors.Is(o.ClientErr, auth.ErrRefused) {
					t.Errorf("%v; want ErrRefused on both sides", o)
				}
				if tt.noTok && !strings.Contains(o.ClientErr.Error(), auth.EnvToken) {
					t.Errorf("the tokenless peer's error %q does not say where the token goes", o.ClientErr)
				}
			})
		}
	}
}

// TestAuthenticateClient has a plugin dial servers with and without the
// token.
func TestAuthenticateClient(t *testing.T) {
	leaktest.Goroutines(t)
	tests := []struct {
		name    string
		server  string // the server's token; "" for none
		ok      bool
		notAuth bool // the client refuses the server
	}{
		{name: "cluster token", server: testToken, ok: true},
		{name: "server with another token", server: "other-" + testToken},
		// A server announcing no token proves nothing: refused.
		{name: "server without auth", server: "", notAuth: true},
	}
	for _, tt := range tests {
		for _, network := range []string{"tcp", "unix"} {
			t.Run(tt.name+"/"+network, func(t *testing.T) {
				o, err := connect(network, mustCreds(t, tt.server).ServerConn, plugin.AuthenticateClient)
				if err != nil {
					t.Fatal(err)
				}
				if tt.ok != (o.String() == "ok") {
					t.Errorf("%v; want ok %v", o, tt.ok)
				}
				switch {
				case tt.notAuth:
					if !errors.Is(o.ClientErr, auth.ErrServerNotAuthenticated) || o.ServerErr == nil {
						t.Errorf("%v; want the client to refuse the server (ErrServerNotAuthenticated)", o)
					}
				case !tt.ok && (!errors.Is(o.ClientErr, auth.ErrRefused) || !errors.Is(o.ServerErr, auth.ErrRefused)):
					t.Errorf("%v; want ErrRefused on both sides", o)
				}
			})
		}
	}
}

// TestPluginToPlugin connects two plugins of the same cluster.
func TestPluginToPlugin(t *testing.T) {
	leaktest.Goroutines(t)
	for _, network := range []string{"tcp", "unix"} {
		o, err := connect(network, plugin.AuthenticateServer, plugin.AuthenticateClient)
		if err != nil || o.String() != "ok" {
			t.Errorf("%s: %v, %v; want ok", network, o, err)
		}
	}
}

// TestCredentialsReadOnce changes the environment after the first use:
// the plugin keeps the credentials its node gave it.
func TestCredentialsReadOnce(t *testing.T) {
	leaktest.Goroutines(t)
	if o, err := connect("tcp", plugin.AuthenticateServer, mustCreds(t, testToken).ClientConn); err != nil || o.String() != "ok" {
		t.Fatalf("first use: %v, %v", o, err)
	}
	t.Setenv(auth.EnvToken, "changed-token")
	t.Setenv(auth.EnvMode, "not-a-mode")
	t.Setenv(auth.EnvTLSCA, "/nonexistent/ca.pem")
	if o, err := connect("tcp", plugin.AuthenticateServer, mustCreds(t, testToken).ClientConn); err != nil || o.String() != "ok" {
		t.Errorf("after the environment changed, the node's token: %v, %v; want ok", o, err)
	}
	if o, err := connect("tcp", plugin.AuthenticateServer, mustCreds(t, "changed-token").ClientConn); err != nil || !errors.Is(o.ServerErr, auth.ErrRefused) {
		t.Errorf("after the environment changed, the new token: %v, %v; want it refused", o, err)
	}
}

// TestAuthenticateClientContext dials a listener that never speaks: the
// handshake ends with ctx.
func TestAuthenticateClientContext(t *testing.T) {
	leaktest.Goroutines(t)
	l, cleanup, err := listen("tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	held := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(held)
			return
		}
		held <- c
	}()
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if c, ok := <-held; ok {
		defer c.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		c, err := plugin.AuthenticateClient(ctx, raw)
		if c != nil {
			c.Close()
		}
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("AuthenticateClient: %v, want context.Canceled", err)
		}
	case <-time.After(2 * auth.HandshakeTimeout):
		t.Fatal("AuthenticateClient did not return")
	}
	if d := time.Since(start); d >= auth.HandshakeTimeout {
		t.Errorf("AuthenticateClient returned after %v: it waited for the handshake timeout, not for ctx", d)
	}
}

// childReport is what authChild found, for the parent to check.
type childReport struct {
	// PluginToPlugin is AuthenticateServer and AuthenticateClient of this
	// process on each other, over TCP and over a unix socket.
	PluginToPlugin, PluginToPluginUnix string
	// GoodPeer and BadPeer are a peer with the expected token (from
	// peerTokenEnv, with this process's TLS files) and one with a wrong
	// token connecting to AuthenticateServer; NoTokenPeer one without.
	GoodPeer, BadPeer, NoTokenPeer string
	// ToGoodPeer is AuthenticateClient to the good peer's server.
	ToGoodPeer string
}

// authChild is the child process: it reports, as JSON on stdout, what the
// plugin's functions do in the environment it was given.
func authChild() int {
	files, err := auth.TLSFromEnv()
	if err != nil {
		files = nil // the plugin side reports the error
	}
	peer := func(token string) *auth.Credentials {
		var c *auth.Credentials
		var err error
		if token == "" {
			c, err = auth.Disabled(files)
		} else {
			c, err = auth.New(token, files)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "peer credentials:", err)
			os.Exit(3)
		}
		return c
	}
	good := peer(os.Getenv(peerTokenEnv))
	run := func(network string, s serverSide, c clientSide) string {
		o, err := connect(network, s, c)
		if err != nil {
			return "setup: " + err.Error()
		}
		return o.String()
	}
	r := childReport{
		PluginToPlugin:     run("tcp", plugin.AuthenticateServer, plugin.AuthenticateClient),
		PluginToPluginUnix: run("unix", plugin.AuthenticateServer, plugin.AuthenticateClient),
		GoodPeer:           run("tcp", plugin.AuthenticateServer, good.ClientConn),
		BadPeer:            run("tcp", plugin.AuthenticateServer, peer("wrong-peer-token").ClientConn),
		NoTokenPeer:        run("tcp", plugin.AuthenticateServer, peer("").ClientConn),
		ToGoodPeer:         run("tcp", good.ServerConn, plugin.AuthenticateClient),
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// TestAuthEnvironments runs a plugin process in each environment a node
// may give it.
func TestAuthEnvironments(t *testing.T) {
	leaktest.Goroutines(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "auth_token")
	fileToken, _, err := auth.LoadOrCreateToken(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	looseFile := filepath.Join(dir, "loose_token")
	if err := os.WriteFile(looseFile, []byte("loose-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(looseFile, 0o644); err != nil {
		t.Fatal(err)
	}
	caDir := filepath.Join(dir, "ca")
	if err := auth.CreateCA(caDir, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	cert, key, err := auth.IssueCert(caDir, caDir, "plugin", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tlsEnv := []string{auth.EnvTLSCA + "=" + filepath.Join(caDir, auth.CAFile), auth.EnvTLSCert + "=" + cert, auth.EnvTLSKey + "=" + key}
	const tok = "child-cluster-token"

	refused := "refused"
	serverNotAuth := "server not authenticated"
	tests := []struct {
		name string
		env  []string
		peer string // the good peer's token
		want childReport
		// wantAll, when set, is a substring every entry must contain (an
		// environment the plugin cannot use).
		wantAll string
	}{
		{name: "token", env: []string{auth.EnvToken + "=" + tok}, peer: tok,
			want: childReport{PluginToPlugin: "ok", PluginToPluginUnix: "ok", GoodPeer: "ok", BadPeer: refused, NoTokenPeer: refused, ToGoodPeer: "ok"}},
		{name: "token file", env: []string{auth.EnvTokenPath + "=" + tokenFile}, peer: fileToken,
			want: childReport{PluginToPlugin: "ok", PluginToPluginUnix: "ok", GoodPeer: "ok", BadPeer: refused, NoTokenPeer: refused, ToGoodPeer: "ok"}},
		{name: "disabled", env: []string{auth.EnvMode + "=" + auth.ModeDisabled, auth.EnvToken + "=" + tok}, peer: "",
			// A peer with a token refuses a server that has none.
			want: childReport{PluginToPlugin: "ok", PluginToPluginUnix: "ok", GoodPeer: "ok", BadPeer: serverNotAuth, NoTokenPeer: "ok", ToGoodPeer: "ok"}},
		{name: "token and TLS", env: append([]string{auth.EnvToken + "=" + tok}, tlsEnv...), peer: tok,
			want: childReport{PluginToPlugin: "ok tls", PluginToPluginUnix: "ok", GoodPeer: "ok tls", BadPeer: refused, NoTokenPeer: refused, ToGoodPeer: "ok tls"}},
		{name: "bad mode", env: []string{auth.EnvToken + "=" + tok, auth.EnvMode + "=sometimes"}, peer: tok, wantAll: auth.EnvMode},
		{name: "partial TLS", env: []string{auth.EnvToken + "=" + tok, tlsEnv[0]}, peer: tok, wantAll: "not set"},
		{name: "insecure token file", env: []string{auth.EnvTokenPath + "=" + looseFile}, peer: tok, wantAll: "chmod 600 " + looseFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0])
			for _, kv := range os.Environ() {
				name, _, _ := strings.Cut(kv, "=")
				if !isAuthEnv(name) {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, childEnv+"=1", peerTokenEnv+"="+tt.peer, "HOME="+t.TempDir())
			cmd.Env = append(cmd.Env, tt.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("child: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
			}
			// Only the refusals AuthenticateServer logs (on stderr, the
			// plugin's logger, without Serve), never with a token.
			for l := range strings.Lines(stderr.String()) {
				if !strings.Contains(l, `"@message":"refused a data connection`) || strings.Contains(l, tok) {
					t.Errorf("child stderr:\n%s", stderr.String())
					break
				}
			}
			var got childReport
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("child output %q: %v", stdout.String(), err)
			}
			gotFields := map[string]string{"PluginToPlugin": got.PluginToPlugin, "PluginToPluginUnix": got.PluginToPluginUnix,
				"GoodPeer": got.GoodPeer, "BadPeer": got.BadPeer, "NoTokenPeer": got.NoTokenPeer, "ToGoodPeer": got.ToGoodPeer}
			wantFields := map[string]string{"PluginToPlugin": tt.want.PluginToPlugin, "PluginToPluginUnix": tt.want.PluginToPluginUnix,
				"GoodPeer": tt.want.GoodPeer, "BadPeer": tt.want.BadPeer, "NoTokenPeer": tt.want.NoTokenPeer, "ToGoodPeer": tt.want.ToGoodPeer}
			for name, g := range gotFields {
				switch w := wantFields[name]; {
				case tt.wantAll != "":
					if !strings.Contains(g, tt.wantAll) {
						t.Errorf("%s: %q, want an error with %q", name, g, tt.wantAll)
					}
				case w == serverNotAuth:
					if !strings.Contains(g, "client: "+auth.ErrServerNotAuthenticated.Error()) {
						t.Errorf("%s: %q, want the client to refuse the server", name, g)
					}
				case w == refused:
					if !strings.Contains(g, "server: "+auth.ErrRefused.Error()) || !strings.Contains(g, "client: "+auth.ErrRefused.Error()) {
						t.Errorf("%s: %q, want refused on both sides", name, g)
					}
				case g != w:
					t.Errorf("%s: %q, want %q", name, g, w)
				}
			}
			if strings.Contains(stdout.String(), tok) || strings.Contains(stdout.String(), fileToken) {
				t.Errorf("a token appears in an error:\n%s", stdout.String())
			}
		})
	}
}

func isAuthEnv(name string) bool {
	for _, n := range auth.EnvNames {
		if n == name {
			return true
		}
	}
	return name == childEnv || name == peerTokenEnv || name == "HOME"
}
