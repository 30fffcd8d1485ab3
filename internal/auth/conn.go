package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Raw connections (the object data plane, plugins' own data connections)
// open with a handshake in which the server speaks first:
//
//	server: magic "GRA1" | mode u8 (0: no token needed, 1: token) | nonce [16]
//	client: HMAC-SHA256(token, "goray-conn-v1" | nonce) [32] (zeros without a token)
//	server: status u8 (0: accepted, 1: refused)
//
// The token never crosses the wire, and a recorded handshake cannot be
// replayed (the nonce is new every time). With TLS the handshake runs
// inside the TLS connection, on TCP only.
const (
	connMagic      = "GRA1"
	connMACContext = "goray-conn-v1"
	nonceSize      = 16
	macSize        = sha256.Size
	// HandshakeTimeout bounds a raw connection's handshake on both sides,
	// so a peer that connects and says nothing holds nothing for long.
	HandshakeTimeout = 10 * time.Second
)

// handshakeTimeout is the bound in force: HandshakeTimeout, lowered by
// tests so that they need not wait for it.
var handshakeTimeout = HandshakeTimeout

// ErrRefused is the error of a raw connection whose handshake the server
// refused (no token, or a wrong one), or that a server refused to accept.
var ErrRefused = errors.New("goray: connection refused: this cluster requires its token")

// ServerConn runs the server side of the handshake on an accepted raw
// connection (after TLS on TCP, when configured). On error the caller
// closes c.
func (c *Credentials) ServerConn(conn net.Conn) (net.Conn, error) {
	c = c.orNone()
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	defer conn.SetDeadline(time.Time{})
	if c.TLS() && conn.LocalAddr().Network() != "unix" {
		tc := tls.Server(conn, c.srv)
		if err := tc.Handshake(); err != nil {
			c.logRefusal(hostOf(conn.RemoteAddr()), "raw connection", "TLS: "+err.Error())
			return nil, fmt.Errorf("goray tls: handshake with %s: %w", conn.RemoteAddr(), err)
		}
		conn = tc
	}
	var hello [len(connMagic) + 1 + nonceSize]byte
	copy(hello[:], connMagic)
	if c.Enabled() {
		hello[len(connMagic)] = 1
	}
	nonce := hello[len(connMagic)+1:]
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	if _, err := conn.Write(hello[:]); err != nil {
		return nil, err
	}
	var mac [macSize]byte
	if _, err := io.ReadFull(conn, mac[:]); err != nil {
		return nil, fmt.Errorf("goray: reading the handshake of %s: %w", conn.RemoteAddr(), err)
	}
	if c.Enabled() && !hmac.Equal(mac[:], connMAC(c.token, nonce)) {
		why := "wrong token"
		if mac == ([macSize]byte{}) {
			why = "no token"
		}
		c.logRefusal(hostOf(conn.RemoteAddr()), "raw connection", why)
		_, _ = conn.Write([]byte{1})
		return nil, fmt.Errorf("%w (%s from %s)", ErrRefused, why, conn.RemoteAddr())
	}
	if _, err := conn.Write([]byte{0}); err != nil {
		return nil, err
	}
	return conn, nil
}

// ClientConn runs the client side of the handshake on a dialled raw
// connection, honouring ctx; on error the caller closes c.
func (c *Credentials) ClientConn(ctx context.Context, conn net.Conn) (rc net.Conn, err error) {
	c = c.orNone()
	// ctx is honoured by moving the deadline into the past when it ends
	// (not by copying its deadline, which would fail the handshake with a
	// network timeout just before ctx reports DeadlineExceeded). The
	// callback uses raw: conn is replaced by the TLS connection below.
	raw := conn
	_ = raw.SetDeadline(time.Now().Add(handshakeTimeout))
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() && err == nil {
			// ctx ended as the handshake did: its callback may move the
			// deadline after it is cleared here, leaving the connection
			// unusable.
			rc, err = nil, ctx.Err()
		}
		_ = raw.SetDeadline(time.Time{})
	}()
	if c.TLS() && conn.LocalAddr().Network() != "unix" {
		tc := tls.Client(conn, c.cli)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, ctxErr(ctx, fmt.Errorf("goray tls: handshake with %s: %w", conn.RemoteAddr(), err))
		}
		conn = tc
	}
	var hello [len(connMagic) + 1 + nonceSize]byte
	// The magic first, so that a peer speaking another protocol is told
	// apart without waiting for a whole hello it may never send.
	n, err := io.ReadFull(conn, hello[:len(connMagic)])
	if n > 0 && string(hello[:n]) != connMagic[:n] {
		return nil, fmt.Errorf("goray: %s is not a goray data connection (or speaks another protocol version)", conn.RemoteAddr())
	}
	if err == nil {
		_, err = io.ReadFull(conn, hello[len(connMagic):])
	}
	if err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("goray: handshake with %s: %w", conn.RemoteAddr(), err))
	}
	var mac []byte
	if c.Enabled() {
		mac = connMAC(c.token, hello[len(connMagic)+1:])
	} else {
		mac = make([]byte, macSize)
	}
	if _, err := conn.Write(mac); err != nil {
		return nil, ctxErr(ctx, err)
	}
	var st [1]byte
	if _, err := io.ReadFull(conn, st[:]); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("goray: handshake with %s: %w", conn.RemoteAddr(), err))
	}
	if st[0] != 0 {
		if !c.Enabled() {
			return nil, fmt.Errorf("%w: no token here; set $%s or $%s", ErrRefused, EnvToken, EnvTokenPath)
		}
		return nil, fmt.Errorf("%w: %s refused this process's token", ErrRefused, conn.RemoteAddr())
	}
	return conn, nil
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func connMAC(token, nonce []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(connMACContext))
	m.Write(nonce)
	return m.Sum(nil)
}

func hostOf(a net.Addr) string {
	if a == nil {
		return "unknown"
	}
	if a.Network() == "unix" {
		return "unix socket"
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}
