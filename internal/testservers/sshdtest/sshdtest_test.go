package sshdtest

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// run runs cmd on addr as the server's user and returns its output.
func run(t *testing.T, s *Server, cfg *ssh.ClientConfig, addr, cmd string) (string, error) {
	t.Helper()
	c, err := ssh.Dial("tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		return "", err
	}
	defer sess.Close()
	out, err := sess.CombinedOutput(cmd)
	return string(out), err
}

// TestServer: every address serves the same sshd, which lets the user in
// with the key, checks out against known_hosts, gives sessions the test's
// TMPDIR and comes back after a restart; a known_hosts with another key is
// refused; after the test's cleanup nothing listens and no connection
// process is left.
func TestServer(t *testing.T) {
	top := t
	var s *Server
	var conns []int
	t.Run("server", func(t *testing.T) {
		s = Start(t, "127.0.2.1", "127.0.2.2")
		if len(s.Addrs) != 2 || !strings.HasPrefix(s.Addrs[0], "127.0.2.1:") || !strings.HasPrefix(s.Addrs[1], "127.0.2.2:") {
			t.Fatalf("addresses %v", s.Addrs)
		}
		cfg, err := s.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range s.Addrs {
			out, err := run(t, s, cfg, a, `id -un; echo "$TMPDIR"`)
			if err != nil {
				t.Fatalf("%s: %v: %s (sshd log: %s)", a, err, out, s.LogTail(5))
			}
			if want := s.User + "\n" + os.TempDir() + "\n"; out != want {
				t.Errorf("%s: the session says %q; want %q", a, out, want)
			}
		}
		// A connection held open (past the server's end) has a process
		// of sshd's, which Stop kills.
		c, err := ssh.Dial("tcp", s.Addrs[0], cfg)
		if err != nil {
			t.Fatal(err)
		}
		top.Cleanup(func() { c.Close() })
		if conns = s.Connections(); len(conns) == 0 {
			t.Error("no connection process found for an open connection")
		}

		// Restarted: the same addresses and key, the open connection
		// gone.
		s.Restart()
		if _, _, err := c.SendRequest("keepalive@openssh.com", true, nil); err == nil {
			t.Error("a connection survived the restart")
		}
		if out, err := run(t, s, cfg, s.Addrs[1], "true"); err != nil {
			t.Fatalf("after a restart: %v: %s", err, out)
		}

		wrong, err := knownhosts.New(s.WrongKnownHosts(t))
		if err != nil {
			t.Fatal(err)
		}
		bad := *cfg
		bad.HostKeyCallback = wrong
		_, err = ssh.Dial("tcp", s.Addrs[1], &bad)
		var ke *knownhosts.KeyError
		if !errors.As(err, &ke) || len(ke.Want) == 0 {
			t.Errorf("a wrong known_hosts: %v; want a key mismatch", err)
		}
	})
	for _, a := range s.Addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still answers after the test", a)
		}
	}
	for _, pid := range conns {
		if alive(pid) {
			t.Errorf("connection process %d outlived the server", pid)
		}
	}
	if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the server's directory %s is left: %v", s.Dir, err)
	}
}
