// Package sshdtest runs a real OpenSSH server (Debian's openssh-server,
// /usr/sbin/sshd) for tests: `sshd -D -e -f <config>` listening on one free
// port of several loopback addresses (127.0.2.1:PORT, 127.0.2.2:PORT, ...,
// each an SSH "host" of its own to a client), with a host key and an
// authorized user key generated for the test, its config, keys, pid file
// and log in a temporary directory. The login user is the user running
// the test (root may log in with the key only: PermitRootLogin
// prohibit-password). Sessions get the test's $TMPDIR, so what they leave
// in it counts as the test's. The server, and every connection process it
// forked, is killed and its directory removed when the test ends.
//
// A missing sshd is a test failure that says to run `make sshd`; tests
// never skip for it.
package sshdtest

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/goray-dev/goray/internal/spawn"
	"github.com/goray-dev/goray/internal/testservers/freeport"
	"github.com/goray-dev/goray/internal/testservers/testbin"
)

// EnvBinary names the environment variable that overrides where the sshd
// binary is (it must be an absolute path: sshd re-executes itself).
const EnvBinary = "GORAY_SSHD"

// DefaultBinary is where Debian's openssh-server installs sshd.
const DefaultBinary = "/usr/sbin/sshd"

// startTimeout bounds a start.
const startTimeout = 30 * time.Second

// Binary returns the sshd binary: $GORAY_SSHD, else /usr/sbin/sshd. The
// error says how to install it.
func Binary() (string, error) {
	return testbin.Find(testbin.Spec{What: "sshd", Env: EnvBinary, Abs: DefaultBinary, Absolute: "sshd re-executes itself",
		Install: "run `make sshd` (it installs Debian's openssh-server package)"})
}

// Server is a running sshd of a test.
type Server struct {
	// Addrs are the addresses it listens on, host:port, one per loopback
	// address given to Start, in that order.
	Addrs []string
	// Port is the port of every address.
	Port int
	// Dir holds its config, keys, pid file and log.
	Dir string
	// User is the login user: the user running the test.
	User string
	// KeyFile is the user's private key (OpenSSH PEM, unencrypted, 0600),
	// authorized by the server.
	KeyFile string
	// KnownHostsFile lists the server's host key for every address.
	KnownHostsFile string
	// HostKey is the server's host public key.
	HostKey ssh.PublicKey
	// Signer is the user's key, for an ssh.ClientConfig.
	Signer ssh.Signer

	t    testing.TB
	bin  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts an sshd listening on a free port of each of ips (loopback
// addresses such as "127.0.2.1"; default 127.0.0.1), waits until every
// address answers with an SSH banner, and stops it when the test ends. A
// missing binary fails t with how to install it.
func Start(t testing.TB, ips ...string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	if len(ips) == 0 {
		ips = []string{"127.0.0.1"}
	}
	u, err := user.Current()
	if err != nil {
		t.Fatalf("sshdtest: the current user: %v", err)
	}
	dir, err := os.MkdirTemp("", "sshd")
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	s := &Server{t: t, bin: bin, Dir: dir, User: u.Username}
	t.Cleanup(func() {
		s.Stop()
		_ = os.RemoveAll(dir)
	})
	if err := s.keys(); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	if err := privsepDir(); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	err = freeport.Start(1, ips, func(ports []int) error {
		port := ports[0]
		s.Port = port
		s.Addrs = s.Addrs[:0]
		for _, ip := range ips {
			s.Addrs = append(s.Addrs, net.JoinHostPort(ip, strconv.Itoa(port)))
		}
		if err := s.writeKnownHosts(s.KnownHostsFile, s.HostKey); err != nil {
			return err
		}
		return s.start()
	})
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	return s
}

// privsepDir creates sshd's privilege separation directory (/run/sshd)
// when it is missing and this process may (root).
func privsepDir() error {
	if _, err := os.Stat("/run/sshd"); err == nil || os.Geteuid() != 0 {
		return nil
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return fmt.Errorf("creating sshd's privilege separation directory: %w", err)
	}
	return nil
}

// keys generates the host key and the user key and writes them, the
// authorized_keys file and the known_hosts path into Dir.
func (s *Server) keys() error {
	_, hostPub, err := newKey(filepath.Join(s.Dir, "host_ed25519"))
	if err != nil {
		return err
	}
	s.HostKey = hostPub
	s.KeyFile = filepath.Join(s.Dir, "user_ed25519")
	signer, userPub, err := newKey(s.KeyFile)
	if err != nil {
		return err
	}
	s.Signer = signer
	if err := os.WriteFile(filepath.Join(s.Dir, "authorized_keys"), ssh.MarshalAuthorizedKey(userPub), 0o600); err != nil {
		return err
	}
	s.KnownHostsFile = filepath.Join(s.Dir, "known_hosts")
	return nil
}

// newKey generates an ed25519 key, writes its private half to path
// (OpenSSH PEM, 0600) and returns it.
func newKey(path string) (ssh.Signer, ssh.PublicKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, nil, err
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, nil, err
	}
	return signer, signer.PublicKey(), nil
}

// writeKnownHosts writes a known_hosts file that lists key for every
// address of the server.
func (s *Server) writeKnownHosts(path string, key ssh.PublicKey) error {
	var b bytes.Buffer
	for _, a := range s.Addrs {
		b.WriteString(knownhosts.Line([]string{knownhosts.Normalize(a)}, key) + "\n")
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}

// WrongKnownHosts writes a known_hosts file into a directory of the test
// that lists another key (freshly generated) for every address of the
// server, as for a host whose key changed, and returns its path.
func (s *Server) WrongKnownHosts(t testing.TB) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "known_hosts")
	if err := s.writeKnownHosts(path, pub); err != nil {
		t.Fatal(err)
	}
	return path
}

// ClientConfig returns a client config that logs in as User with the
// user's key and checks the host key against KnownHostsFile.
func (s *Server) ClientConfig() (*ssh.ClientConfig, error) {
	cb, err := knownhosts.New(s.KnownHostsFile)
	if err != nil {
		return nil, err
	}
	return &ssh.ClientConfig{User: s.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(s.Signer)}, HostKeyCallback: cb, Timeout: 10 * time.Second}, nil
}

// config is the server's sshd_config.
func (s *Server) config() string {
	lines := []string{
		"# sshd of a goray test (internal/testservers/sshdtest)",
		"Port " + strconv.Itoa(s.Port),
	}
	for _, a := range s.Addrs {
		lines = append(lines, "ListenAddress "+a)
	}
	lines = append(lines,
		"HostKey "+filepath.Join(s.Dir, "host_ed25519"),
		"PidFile "+filepath.Join(s.Dir, "sshd.pid"),
		"AuthorizedKeysFile "+filepath.Join(s.Dir, "authorized_keys"),
		"AllowUsers "+s.User,
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PermitRootLogin prohibit-password",
		"StrictModes no",
		"UsePAM no",
		"PermitUserEnvironment no",
		"X11Forwarding no",
		"AllowTcpForwarding no",
		"PrintMotd no",
		"PrintLastLog no",
		"UseDNS no",
		"MaxSessions 64",
		"MaxStartups 64:30:128",
		"LogLevel INFO",
		// Sessions get the test's TMPDIR: what they leave there counts.
		"SetEnv TMPDIR="+os.TempDir(),
	)
	return strings.Join(lines, "\n") + "\n"
}

func (s *Server) logFile() string { return filepath.Join(s.Dir, "sshd.log") }

func (s *Server) start() error {
	conf := filepath.Join(s.Dir, "sshd_config")
	if err := os.WriteFile(conf, []byte(s.config()), 0o600); err != nil {
		return err
	}
	// Check the config first: its errors are clearer than a dead server.
	if out, err := exec.Command(s.bin, "-t", "-f", conf).CombinedOutput(); err != nil {
		return fmt.Errorf("sshd -t -f %s: %v: %s", conf, err, bytes.TrimSpace(out))
	}
	log, err := os.OpenFile(s.logFile(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(s.bin, "-D", "-e", "-f", conf)
	cmd.Stdout, cmd.Stderr = log, log
	// Own process group, and killed when this process dies however it
	// dies (spawn.Start makes Pdeathsig reliable).
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
			return fmt.Errorf("sshd on %v exited at start: %s", s.Addrs, s.LogTail(10))
		default:
		}
		if s.banners() == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	err = s.banners()
	s.kill()
	return fmt.Errorf("sshd on %v did not answer within %s: %v; its log: %s", s.Addrs, startTimeout, err, s.LogTail(10))
}

// banners checks that every address answers with an SSH banner.
func (s *Server) banners() error {
	for _, a := range s.Addrs {
		c, err := net.DialTimeout("tcp", a, time.Second)
		if err != nil {
			return err
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		if !strings.HasPrefix(line, "SSH-2.0-") {
			return fmt.Errorf("%s answered %q, not an SSH banner", a, strings.TrimSpace(line))
		}
	}
	return nil
}

// LogTail returns the last n lines of the server's log, joined by " | ".
func (s *Server) LogTail(n int) string {
	b, _ := os.ReadFile(s.logFile())
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// kill kills the listening server and every process it forked for
// connections (and their sessions' processes still in its tree), and
// waits until they are gone.
func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	tree := descendants(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, p := range tree {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	<-s.done
	s.cmd = nil
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []int
		for _, p := range tree {
			if alive(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Errorf("sshdtest: processes %v of sshd survive SIGKILL", left)
			return
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// Connections returns the live processes sshd forked for connections
// and their sessions' processes still in its process tree.
func (s *Server) Connections() []int {
	if s.cmd == nil {
		return nil
	}
	return descendants(s.cmd.Process.Pid)
}

// procStat returns the parent of pid and whether pid is live (not a
// zombie).
func procStat(pid int) (ppid int, live bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0, false
	}
	f := strings.Fields(string(stat[i+2:]))
	if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, true
}

func alive(pid int) bool {
	_, live := procStat(pid)
	return live
}

// descendants returns the live processes whose ancestry leads to root.
func descendants(root int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, live := procStat(pid); live {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// Restart kills the server if it runs (and its connection processes) and
// starts it again on the same addresses with the same keys, failing the
// test if it does not come back.
func (s *Server) Restart() {
	s.t.Helper()
	s.kill()
	if err := s.start(); err != nil {
		s.t.Fatalf("sshdtest: restart: %v", err)
	}
}

// Stop kills the server and its connection processes (the sessions'
// processes started with setsid, such as detached daemons, are the test's
// to stop). It may be called more than once.
func (s *Server) Stop() { s.kill() }
