package redistest

import (
	"crypto/tls"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStartRestartStop: the server answers, comes back on the same address
// after a kill, keeps the password off its command line, and is gone after
// the test's cleanup.
func TestStartRestartStop(t *testing.T) {
	var s *Server
	t.Run("server", func(t *testing.T) {
		s = Start(t)
		if err := s.ping(); err != nil {
			t.Fatalf("ping: %v", err)
		}
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(cmdline), s.Password) {
			t.Fatalf("the password is on the server's command line: %q", cmdline)
		}
		addr := s.Address
		s.Restart()
		if s.Address != addr {
			t.Fatalf("restart moved the server from %s to %s", addr, s.Address)
		}
		if err := s.ping(); err != nil {
			t.Fatalf("ping after restart: %v", err)
		}
	})
	// The subtest's cleanup ran: nothing listens there any more.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Address, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the server at %s outlived its test", s.Address)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// TestStartTLS: a server WithTLS answers over TLS with the client
// certificate, across a restart, refuses a plaintext client, and refuses
// a TLS client without a certificate when it requires one.
func TestStartTLS(t *testing.T) {
	s := Start(t, WithTLS(ClientCertRequired))
	if s.TLS == nil {
		t.Fatal("no TLS files")
	}
	if err := s.ping(); err != nil {
		t.Fatalf("ping over TLS: %v", err)
	}
	s.Restart()
	if err := s.ping(); err != nil {
		t.Fatalf("ping over TLS after restart: %v", err)
	}
	plain := &Server{Address: s.Address, Password: s.Password}
	if err := plain.ping(); err == nil {
		t.Fatal("a plaintext PING to the TLS port was answered")
	}
	cfg, err := s.TLS.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Certificates = nil
	c, err := tls.Dial("tcp", s.Address, cfg)
	if err == nil {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		_, _ = c.Write([]byte("PING\r\n"))
		_, err = c.Read(make([]byte, 64))
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client without a certificate: %v, want refused for its missing certificate", err)
	}
}
