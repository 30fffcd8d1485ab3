// Package redistest runs a real redis-server for a test: on 127.0.0.1 at
// a free port, with its data in a temporary directory, append-only with
// fsync on every write (so a restart loses nothing), stopped and removed
// when the test ends. `make tools` installs the server (Debian's
// redis-server package, built with TLS). WithTLS makes it serve TLS only,
// with certificates made for the test.
package redistest

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/spawn"
	"github.com/goray-dev/goray/internal/testservers/freeport"
	"github.com/goray-dev/goray/internal/testservers/testbin"
)

// EnvBinary names the environment variable that overrides where the
// redis-server binary is.
const EnvBinary = "GORAY_REDIS_SERVER"

// startTimeout bounds a start (and a restart).
const startTimeout = 30 * time.Second

// Binary returns the redis-server binary: $GORAY_REDIS_SERVER, else
// redis-server on $PATH. The error says how to install it.
func Binary() (string, error) {
	return testbin.Find(testbin.Spec{What: "redis-server", Env: EnvBinary, Commands: []string{"redis-server"},
		Install: "run `make tools` (it installs Debian's redis-server package)"})
}

// Server is a running redis-server of a test.
type Server struct {
	// Address is 127.0.0.1:port.
	Address string
	// Password is required of clients (requirepass).
	Password string
	// Dir holds the server's data.
	Dir string
	// TLS is the server's certificates and a client's, when it was
	// started WithTLS (nil otherwise): Address then serves TLS only.
	TLS *TLSFiles

	t testing.TB
	// authClients is the server's tls-auth-clients (WithTLS).
	authClients string
	bin         string
	cmd         *exec.Cmd
	done        chan struct{}
}

// TLSFiles are the PEM files of a server started WithTLS, all in one
// temporary directory (keys 0600): a CA made for the test, the server's
// certificate for 127.0.0.1 and localhost, and a client certificate, all
// signed by the CA.
type TLSFiles struct {
	// Dir holds the files (and the CA's key, ca-key.pem).
	Dir string
	// CA is the CA certificate clients verify the server with.
	CA string
	// ServerCert and ServerKey are the server's.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client's, for a server that requires
	// client certificates.
	ClientCert, ClientKey string
}

// Option changes how Start runs the server.
type Option func(*Server)

// Client-certificate policies of WithTLS (redis-server's tls-auth-clients).
const (
	// ClientCertRequired: a client without a certificate signed by the CA
	// is refused.
	ClientCertRequired = "yes"
	// ClientCertOptional: a client may present one (it is then checked).
	ClientCertOptional = "optional"
)

// WithTLS serves TLS only (tls-port on Address, no plaintext port), with
// certificates made for the test (Server.TLS); clients is
// ClientCertRequired or ClientCertOptional.
func WithTLS(clients string) Option {
	return func(s *Server) { s.authClients = clients }
}

// Start starts a server with a fresh data directory and a random
// password, waits until it answers, and stops it at t's cleanup. A missing
// binary fails t with how to install it.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s := &Server{t: t, bin: bin, Dir: t.TempDir(), Password: fmt.Sprintf("pw%d", time.Now().UnixNano())}
	for _, o := range opts {
		o(s)
	}
	if s.authClients != "" {
		if s.TLS, err = makeTLS(t.TempDir()); err != nil {
			t.Fatalf("redistest: making TLS certificates: %v", err)
		}
	}
	err = freeport.Start(1, nil, func(ports []int) error {
		s.Address = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		return s.start()
	})
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() error {
	_, port, _ := net.SplitHostPort(s.Address)
	// The configuration, password included, goes on stdin ("-"), so
	// that it is not on the command line for other users to read.
	lines := []string{
		"bind 127.0.0.1", "port " + port, "dir " + s.Dir,
		"requirepass " + s.Password,
		"appendonly yes", "appendfsync always",
		`save ""`, "daemonize no", "protected-mode yes",
		"logfile " + filepath.Join(s.Dir, "redis.log"),
	}
	if s.TLS != nil {
		lines[1] = "port 0"
		lines = append(lines, "tls-port "+port,
			"tls-cert-file "+s.TLS.ServerCert, "tls-key-file "+s.TLS.ServerKey,
			"tls-ca-cert-file "+s.TLS.CA, "tls-auth-clients "+s.authClients)
	}
	conf := strings.Join(lines, "\n") + "\n"
	cmd := exec.Command(s.bin, "-")
	cmd.Stdin = strings.NewReader(conf)
	// Own process group (killed whole), and killed when this process dies
	// however it dies (spawn.Start makes Pdeathsig reliable).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn.Start(cmd); err != nil {
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("redis-server at %s exited at start: %s", s.Address, lastLines(string(log), 5))
		default:
		}
		if s.ping() == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	s.kill()
	return fmt.Errorf("redis-server at %s did not answer within %s", s.Address, startTimeout)
}

// makeTLS makes a CA, a server certificate for 127.0.0.1 and localhost
// and a client certificate in dir.
func makeTLS(dir string) (*TLSFiles, error) {
	const validFor = 24 * time.Hour
	if err := auth.CreateCA(dir, "redistest CA", validFor); err != nil {
		return nil, err
	}
	f := &TLSFiles{Dir: dir, CA: filepath.Join(dir, auth.CAFile)}
	var err error
	if f.ServerCert, f.ServerKey, err = auth.IssueCert(dir, dir, "redis-server", []string{"127.0.0.1", "localhost"}, validFor); err != nil {
		return nil, err
	}
	if f.ClientCert, f.ClientKey, err = auth.IssueCert(dir, dir, "redis-client", nil, validFor); err != nil {
		return nil, err
	}
	return f, nil
}

// ClientTLS is a client configuration for a server started WithTLS: it
// trusts the test's CA and presents the client certificate.
func (f *TLSFiles) ClientTLS() (*tls.Config, error) {
	ca, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no certificate", f.CA)
	}
	cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: []tls.Certificate{cert}}, nil
}

// ping sends AUTH and PING and expects +PONG (over TLS for a server
// started WithTLS).
func (s *Server) ping() error {
	var c net.Conn
	var err error
	if s.TLS != nil {
		cfg, cerr := s.TLS.ClientTLS()
		if cerr != nil {
			return cerr
		}
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", s.Address, cfg)
	} else {
		c, err = net.DialTimeout("tcp", s.Address, time.Second)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "AUTH %s\r\nPING\r\n", s.Password)
	r := bufio.NewReader(c)
	for _, want := range []string{"+OK", "+PONG"} {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if strings.TrimSpace(line) != want {
			return fmt.Errorf("redis-server answered %q, want %s", strings.TrimSpace(line), want)
		}
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// Kill kills the server with SIGKILL (as a crash) and waits for it.
func (s *Server) Kill() { s.kill() }

// Restart kills the server if it runs and starts it again on the same
// address and data directory, failing the test if it does not come back.
func (s *Server) Restart() {
	s.t.Helper()
	s.kill()
	if err := s.start(); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

// Stop kills the server; the data directory goes with the test's TempDir.
func (s *Server) Stop() { s.kill() }
