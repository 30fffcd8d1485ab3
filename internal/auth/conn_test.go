package auth

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/waitfor"
)

// rogueHello writes a GRA2 hello in mode and returns its server nonce.
func rogueHello(c net.Conn, mode byte) ([]byte, error) {
	hello := make([]byte, helloSize)
	copy(hello, connMagic)
	hello[len(connMagic)] = mode
	sn := hello[len(connMagic)+1:]
	if _, err := rand.Read(sn); err != nil {
		return nil, err
	}
	_, err := c.Write(hello)
	return sn, err
}

// rogueAnswer reads a client's answer: its nonce and MAC.
func rogueAnswer(c net.Conn) (cn, mac []byte, err error) {
	b := make([]byte, nonceSize+macSize)
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, nil, err
	}
	return b[:nonceSize], b[nonceSize:], nil
}

// TestRawConnRogueServer has a client with the cluster token connect to
// servers that do not hold it (or cheat with one that does): each must be
// refused with ErrServerNotAuthenticated naming the server, never given a
// connection. Before the handshake authenticated servers (GRA1), a client
// accepted any server that said "accepted".
func TestRawConnRogueServer(t *testing.T) {
	leaktest.Goroutines(t)
	const token = "rogue-test-token"
	realSrv := mustNew(t, token, nil)
	realL := listen(t, "tcp")
	defer realL.Close()
	// A real server with the token, for the rogue that relays to it.
	realDone := make(chan error, 1)

	tests := []struct {
		name string
		// serve plays the rogue server on c; it returns what it saw or
		// did, for the test's log.
		serve func(c net.Conn) error
		// anyErr: the client may fail otherwise than with
		// ErrServerNotAuthenticated (a cut-short handshake), but must fail.
		anyErr bool
		// sendsNothing: the client must send nothing to this server.
		sendsNothing bool
	}{
		{
			name:         "announces no token",
			sendsNothing: true,
			serve: func(c net.Conn) error {
				if _, err := rogueHello(c, modeNoToken); err != nil {
					return err
				}
				b, _ := io.ReadAll(c)
				if len(b) > 0 {
					return fmt.Errorf("the client sent %d bytes to a server announcing no token", len(b))
				}
				return nil
			},
		},
		{
			name: "accepts anyone, proves nothing",
			serve: func(c net.Conn) error {
				if _, err := rogueHello(c, modeToken); err != nil {
					return err
				}
				if _, _, err := rogueAnswer(c); err != nil {
					return err
				}
				_, err := c.Write(make([]byte, 1+macSize))
				return err
			},
		},
		{
			name: "proof with another token",
			serve: func(c net.Conn) error {
				sn, err := rogueHello(c, modeToken)
				if err != nil {
					return err
				}
				cn, _, err := rogueAnswer(c)
				if err != nil {
					return err
				}
				_, err = c.Write(append([]byte{0}, connMAC([]byte("other-"+token), connServerMACCtx, cn, sn)...))
				return err
			},
		},
		{
			name: "reflects the client's own MAC",
			serve: func(c net.Conn) error {
				if _, err := rogueHello(c, modeToken); err != nil {
					return err
				}
				_, mac, err := rogueAnswer(c)
				if err != nil {
					return err
				}
				_, err = c.Write(append([]byte{0}, mac...))
				return err
			},
		},
		{
			// What a client computes, put in the server's place: the
			// contexts keep a client's MAC from ever passing as a
			// server's, even over the same nonces.
			name: "the client's context instead of the server's",
			serve: func(c net.Conn) error {
				sn, err := rogueHello(c, modeToken)
				if err != nil {
					return err
				}
				cn, _, err := rogueAnswer(c)
				if err != nil {
					return err
				}
				_, err = c.Write(append([]byte{0}, connMAC([]byte(token), connClientMACCtx, cn, sn)...))
				return err
			},
		},
		{
			// A proof recorded from another handshake (another client
			// nonce) does not fit this one.
			name: "a recorded proof for another client nonce",
			serve: func(c net.Conn) error {
				sn, err := rogueHello(c, modeToken)
				if err != nil {
					return err
				}
				if _, _, err := rogueAnswer(c); err != nil {
					return err
				}
				other := bytes.Repeat([]byte{9}, nonceSize)
				_, err = c.Write(append([]byte{0}, connMAC([]byte(token), connServerMACCtx, other, sn)...))
				return err
			},
		},
		{
			// The rogue passes the client's answer (to the rogue's own
			// nonce) to a real server to get a proof: the real server
			// refuses it and proves nothing, so the rogue has nothing to
			// pass back.
			name: "relays the client's answer to a real server",
			serve: func(c net.Conn) error {
				if _, err := rogueHello(c, modeToken); err != nil {
					return err
				}
				cn, mac, err := rogueAnswer(c)
				if err != nil {
					return err
				}
				go func() {
					rc, err := realL.Accept()
					if err != nil {
						realDone <- err
						return
					}
					defer rc.Close()
					_, err = realSrv.ServerConn(rc)
					realDone <- err
				}()
				s, err := net.Dial("tcp", realL.Addr().String())
				if err != nil {
					return err
				}
				defer s.Close()
				if _, err := io.ReadFull(s, make([]byte, helloSize)); err != nil {
					return err
				}
				if _, err := s.Write(append(append([]byte{}, cn...), mac...)); err != nil {
					return err
				}
				got, _ := io.ReadAll(s)
				if !bytes.Equal(got, []byte{1}) {
					return fmt.Errorf("the real server answered the relayed answer with %x, want only 1 (refused)", got)
				}
				if err := <-realDone; !errors.Is(err, ErrRefused) {
					return fmt.Errorf("the real server: %v, want ErrRefused", err)
				}
				_, err = c.Write(append([]byte{0}, make([]byte, macSize)...))
				return err
			},
		},
		{
			name:   "truncated proof, then close",
			anyErr: true,
			serve: func(c net.Conn) error {
				if _, err := rogueHello(c, modeToken); err != nil {
					return err
				}
				if _, _, err := rogueAnswer(c); err != nil {
					return err
				}
				_, err := c.Write(make([]byte, 1+macSize/2))
				return err
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := listen(t, "tcp")
			served := make(chan error, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					served <- err
					return
				}
				defer c.Close()
				served <- tt.serve(c)
			}()
			raw := dialRaw(t, l)
			ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
			defer cancel()
			c, err := mustNew(t, token, nil).ClientConn(ctx, raw)
			raw.Close()
			if err == nil {
				c.Close()
				t.Fatal("the client accepted a server that did not prove the token")
			}
			if !tt.anyErr && !errors.Is(err, ErrServerNotAuthenticated) {
				t.Errorf("client: %v, want ErrServerNotAuthenticated", err)
			}
			if errors.Is(err, ErrServerNotAuthenticated) && !strings.Contains(err.Error(), l.Addr().String()) {
				t.Errorf("client error %q does not name the server %s", err, l.Addr())
			}
			if strings.Contains(err.Error(), token) {
				t.Errorf("client error %q carries the token", err)
			}
			select {
			case err := <-served:
				if err != nil && !tt.anyErr {
					t.Errorf("rogue: %v", err)
				}
			case <-time.After(waitfor.Generous):
				t.Fatal("the rogue server did not finish")
			}
		})
	}
}

// TestRawConnDisabledPair checks that two peers without a token still
// connect (mode 0 on both sides), over TCP and unix sockets, and that a
// peer without a token is refused by a server with one.
func TestRawConnDisabledPair(t *testing.T) {
	leaktest.Goroutines(t)
	tests := []struct {
		name     string
		srv, cli *Credentials
		ok       bool
		cliErr   error
	}{
		{name: "both disabled", srv: mustDisabled(t, nil), cli: mustDisabled(t, nil), ok: true},
		{name: "nil credentials on both sides", srv: nil, cli: nil, ok: true},
		{name: "disabled client, server with token", srv: mustNew(t, "tok", nil), cli: mustDisabled(t, nil), cliErr: ErrRefused},
		{name: "client with token, disabled server", srv: mustDisabled(t, nil), cli: mustNew(t, "tok", nil), cliErr: ErrServerNotAuthenticated},
	}
	for _, tt := range tests {
		for _, network := range []string{"tcp", "unix"} {
			t.Run(tt.name+"/"+network, func(t *testing.T) {
				s, c := rawHandshake(t, network, tt.srv, tt.cli)
				if tt.ok {
					if s.err != nil || c.err != nil {
						t.Fatalf("server %v, client %v", s.err, c.err)
					}
					exchange(t, s.conn, c.conn)
					return
				}
				if !errors.Is(c.err, tt.cliErr) || c.conn != nil {
					t.Errorf("client: %v, want %v", c.err, tt.cliErr)
				}
				if s.err == nil {
					t.Error("the server accepted")
				}
			})
		}
	}
}
