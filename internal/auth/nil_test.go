package auth

import (
	"context"
	"net"
	"slices"
	"testing"

	"github.com/goray-dev/goray/internal/waitfor"
)

// TestNilCredentials: a nil *Credentials is usable and means no token and
// no TLS, on both sides of a raw connection and in a child's environment.
func TestNilCredentials(t *testing.T) {
	var c *Credentials
	if c.Enabled() || c.TLS() || c.Token() != "" || c.TLSFiles() != nil {
		t.Fatal("nil credentials claim a token or TLS")
	}
	if env := c.Env(); !slices.Equal(env, []string{EnvMode + "=" + ModeDisabled}) {
		t.Errorf("Env() = %v", env)
	}
	if len(c.ServerOptions()) == 0 || len(c.DialOptions("127.0.0.1:1")) == 0 {
		t.Error("no gRPC options from nil credentials")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		s, err := ln.Accept()
		if err == nil {
			_, err = c.ServerConn(s)
			s.Close()
		}
		done <- err
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	if _, err := c.ClientConn(ctx, raw); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
}
