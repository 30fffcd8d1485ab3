// Package redistest runs a real redis-server for a test: on 127.0.0.1 at
// a free port, with its data in a temporary directory, append-only with
// fsync on every write (so a restart loses nothing), stopped and removed
// when the test ends. `make tools` installs the server (Debian's
// redis-server package).
package redistest

import (
	"bufio"
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

	t    testing.TB
	bin  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a server with a fresh data directory and a random
// password, waits until it answers, and stops it at t's cleanup. A missing
// binary fails t with how to install it.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s := &Server{t: t, bin: bin, Dir: t.TempDir(), Password: fmt.Sprintf("pw%d", time.Now().UnixNano())}
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
	conf := strings.Join([]string{
		"bind 127.0.0.1", "port " + port, "dir " + s.Dir,
		"requirepass " + s.Password,
		"appendonly yes", "appendfsync always",
		`save ""`, "daemonize no", "protected-mode yes",
		"logfile " + filepath.Join(s.Dir, "redis.log"),
	}, "\n") + "\n"
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

// ping sends AUTH and PING and expects +PONG.
func (s *Server) ping() error {
	c, err := net.DialTimeout("tcp", s.Address, time.Second)
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
