package dataplane

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/waitfor"
)

// claimsTokenAcceptsAnyone plays the server side of the GRA2 handshake
// without the token: it announces that it requires one, accepts any
// answer and sends a proof it cannot compute (zeros).
func claimsTokenAcceptsAnyone(c net.Conn) (net.Conn, error) {
	hello := make([]byte, 4+1+16)
	copy(hello, "GRA2")
	hello[4] = 1
	if _, err := rand.Read(hello[5:]); err != nil {
		return nil, err
	}
	if _, err := c.Write(hello); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(c, make([]byte, 16+32)); err != nil {
		return nil, err
	}
	if _, err := c.Write(make([]byte, 1+32)); err != nil {
		return nil, err
	}
	return c, nil
}

// TestDialRefusesRogueServer points the real data-plane client, holding the
// cluster token, at rogue data planes that serve forged bytes for any
// object: each is refused at Dial and not one forged byte is read. On the
// GRA1 handshake (the client authenticated to the server, never the server
// to the client) the rogue without a token was accepted and its bytes
// taken as the object's.
func TestDialRefusesRogueServer(t *testing.T) {
	leaktest.Goroutines(t)
	const token = "dataplane-rogue-token"
	cli, err := auth.New(token, nil)
	if err != nil {
		t.Fatal(err)
	}
	noToken, err := auth.Disabled(nil)
	if err != nil {
		t.Fatal(err)
	}
	otherCluster, err := auth.New("other-"+token, nil)
	if err != nil {
		t.Fatal(err)
	}
	oid := ids.ObjectIDFor(ids.New(), 1)
	forged := []byte("forged object bytes")
	tests := []struct {
		name string
		// handshake is the rogue's side of the handshake: nil runs
		// creds' ServerConn.
		handshake func(net.Conn) (net.Conn, error)
		creds     *auth.Credentials
		want      error
	}{
		{name: "data plane without the token", creds: noToken, want: auth.ErrServerNotAuthenticated},
		{name: "claims the token, accepts anyone", handshake: claimsTokenAcceptsAnyone, want: auth.ErrServerNotAuthenticated},
		{name: "another cluster's data plane", creds: otherCluster, want: auth.ErrRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The rogue: the real server code serving a source of forged
			// bytes, behind the rogue's handshake.
			src := &mapSource{objs: map[ids.ObjectID][]byte{oid: forged}}
			rogue := NewServer(src, tt.creds, hclog.NewNullLogger())
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				if tt.handshake == nil {
					rogue.Serve(lis)
					return
				}
				c, err := lis.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				if ac, err := tt.handshake(c); err == nil {
					_ = rogue.serveConn(ac)
				}
			}()
			defer func() { lis.Close(); rogue.Close(); <-done }()

			ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
			defer cancel()
			rr, err := Dial(ctx, lis.Addr().String(), cli)
			if err == nil {
				defer rr.Close()
				got := []byte("(no response)")
				if size, _, err := rr.Request(oid, 0, -1); err == nil {
					got = make([]byte, size)
					_ = rr.ReadInto(got)
				}
				t.Fatalf("the client accepted the rogue data plane and read %q as object %s", got, oid)
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("Dial: %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), lis.Addr().String()) {
				t.Errorf("Dial error %q does not name the rogue %s", err, lis.Addr())
			}
		})
	}
}
