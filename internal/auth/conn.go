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
// open with a handshake in which each end proves to the other that it holds
// the cluster token. The server speaks first:
//
//	server: magic "GRA2" | mode u8 (0: no token, 1: token) | server nonce [16]
//	client: client nonce [16] |
//	        HMAC-SHA256(token, "goray-conn-v2 client" | server nonce | client nonce) [32]
//	        (zeros without a token)
//	server: status u8 (0: accepted, 1: refused), then, in mode 1 and
//	        accepted only: HMAC-SHA256(token, "goray-conn-v2 server" | client nonce | server nonce) [32]
//
// The client checks the server's MAC in constant time and refuses a server
// that does not prove the token (ErrServerNotAuthenticated); a client with
// a token also refuses a server that announces mode 0, since anyone can
// announce that. Two peers without a token (mode 0 on both sides)
// authenticate nobody and connect.
//
// What this protects, with or without TLS: the token never crosses the
// wire; a recorded handshake cannot be replayed (each side's MAC covers
// the other side's fresh nonce); one side's MAC cannot be reflected as the
// other's, on the same connection or another (the two MACs have distinct
// contexts, so a server cannot answer a client with the client's own MAC,
// nor with a MAC it got by connecting to a real server as a client); a
// server without the token, and so a rogue listener serving forged bytes,
// is refused by every client holding the token; the server's MAC is sent
// only to a client that proved the token, so it is no oracle for strangers.
//
// What it does not protect without TLS: the handshake authenticates the
// two ends at the start, not the bytes after it, and it is not bound to
// the connection it runs on. A man in the middle who can intercept a
// connection (or get a client to dial it) and relays a whole handshake
// between a real client and a real server, passing each side's nonce and
// MAC through unchanged, never learns the token, yet leaves both ends
// authenticated to each other; it can then read and alter the bytes that
// follow, or send its own requests to the server. Only TLS (the handshake
// then runs inside the TLS connection, on TCP only, after both ends'
// certificates were checked) protects the bytes in transit.
const (
	connMagic = "GRA2"
	// connMagicFamily is the part of the magic that every version of the
	// handshake shares, to tell a version mismatch from another protocol.
	connMagicFamily  = "GRA"
	connClientMACCtx = "goray-conn-v2 client"
	connServerMACCtx = "goray-conn-v2 server"
	nonceSize        = 16
	macSize          = sha256.Size
	helloSize        = len(connMagic) + 1 + nonceSize
	// HandshakeTimeout bounds a raw connection's handshake on both sides,
	// so a peer that connects and says nothing holds nothing for long.
	HandshakeTimeout = 10 * time.Second
)

// Handshake modes, the byte after the magic in the server's hello.
const (
	modeNoToken byte = 0
	modeToken   byte = 1
)

// handshakeTimeout is the bound in force: HandshakeTimeout, lowered by
// tests so that they need not wait for it.
var handshakeTimeout = HandshakeTimeout

// ErrRefused is the error of a raw connection whose handshake the server
// refused (no token, or a wrong one), or that a server refused to accept.
var ErrRefused = errors.New("goray: connection refused: this cluster requires its token")

// ErrServerNotAuthenticated is the error of a raw connection whose server
// did not prove that it holds the cluster token: a wrong proof, or a server
// announcing no token to a client that has one. The client refused it
// (the server may be a rogue listener, or belong to another cluster).
var ErrServerNotAuthenticated = errors.New("goray: the server did not prove it holds the cluster token")

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
	var hello [helloSize]byte
	copy(hello[:], connMagic)
	if c.Enabled() {
		hello[len(connMagic)] = modeToken
	}
	sn := hello[len(connMagic)+1:]
	if _, err := rand.Read(sn); err != nil {
		return nil, err
	}
	if _, err := conn.Write(hello[:]); err != nil {
		return nil, err
	}
	var reply [nonceSize + macSize]byte
	if _, err := io.ReadFull(conn, reply[:]); err != nil {
		return nil, fmt.Errorf("goray: reading the handshake of %s: %w", conn.RemoteAddr(), err)
	}
	cn, mac := reply[:nonceSize], reply[nonceSize:]
	if !c.Enabled() {
		if _, err := conn.Write([]byte{0}); err != nil {
			return nil, err
		}
		return conn, nil
	}
	if !hmac.Equal(mac, connMAC(c.token, connClientMACCtx, sn, cn)) {
		why := "wrong token"
		if [macSize]byte(mac) == ([macSize]byte{}) {
			why = "no token"
		}
		c.logRefusal(hostOf(conn.RemoteAddr()), "raw connection", why)
		_, _ = conn.Write([]byte{1})
		return nil, fmt.Errorf("%w (%s from %s)", ErrRefused, why, conn.RemoteAddr())
	}
	// Accepted: the status and the server's proof in one write.
	if _, err := conn.Write(append([]byte{0}, connMAC(c.token, connServerMACCtx, cn, sn)...)); err != nil {
		return nil, err
	}
	return conn, nil
}

// ClientConn runs the client side of the handshake on a dialled raw
// connection, honouring ctx; on error the caller closes c. With a token,
// it returns a connection only to a server that proved it holds the same
// token; otherwise an error wrapping ErrServerNotAuthenticated.
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
	var hello [helloSize]byte
	// The magic first, so that a peer speaking another protocol is told
	// apart without waiting for a whole hello it may never send.
	n, err := io.ReadFull(conn, hello[:len(connMagic)])
	if n > 0 && string(hello[:n]) != connMagic[:n] {
		if n == len(connMagic) && string(hello[:len(connMagicFamily)]) == connMagicFamily {
			return nil, fmt.Errorf("goray: %s speaks data-connection protocol %q, this process %q: are both from the same goray version?", conn.RemoteAddr(), hello[:n], connMagic)
		}
		return nil, fmt.Errorf("goray: %s is not a goray data connection (or speaks another protocol version)", conn.RemoteAddr())
	}
	if err == nil {
		_, err = io.ReadFull(conn, hello[len(connMagic):])
	}
	if err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("goray: handshake with %s: %w", conn.RemoteAddr(), err))
	}
	mode, sn := hello[len(connMagic)], hello[len(connMagic)+1:]
	switch {
	case mode != modeNoToken && mode != modeToken:
		return nil, fmt.Errorf("goray: handshake with %s: unknown mode %d", conn.RemoteAddr(), mode)
	case mode == modeNoToken && c.Enabled():
		// Anyone can say they need no token: proving nothing, the server
		// is refused before this side sends anything.
		return nil, fmt.Errorf("%w: %s announced that it has no token", ErrServerNotAuthenticated, conn.RemoteAddr())
	}
	var reply [nonceSize + macSize]byte
	cn := reply[:nonceSize]
	if _, err := rand.Read(cn); err != nil {
		return nil, err
	}
	if c.Enabled() {
		copy(reply[nonceSize:], connMAC(c.token, connClientMACCtx, sn, cn))
	}
	if _, err := conn.Write(reply[:]); err != nil {
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
	if mode == modeNoToken {
		return conn, nil // neither side has a token: nothing to prove
	}
	if !c.Enabled() {
		// A real server with a token never accepts a client without one.
		return nil, fmt.Errorf("goray: handshake with %s: the server requires a token yet accepted a client without one", conn.RemoteAddr())
	}
	var proof [macSize]byte
	if _, err := io.ReadFull(conn, proof[:]); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("goray: handshake with %s: reading the server's proof: %w", conn.RemoteAddr(), err))
	}
	if !hmac.Equal(proof[:], connMAC(c.token, connServerMACCtx, cn, sn)) {
		return nil, fmt.Errorf("%w: %s answered with a wrong proof (another cluster's token, or none)", ErrServerNotAuthenticated, conn.RemoteAddr())
	}
	return conn, nil
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// connMAC is HMAC-SHA256(token, context | first | second): the client's
// proof (connClientMACCtx, server nonce, client nonce) or the server's
// (connServerMACCtx, client nonce, server nonce).
func connMAC(token []byte, context string, first, second []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(context))
	m.Write(first)
	m.Write(second)
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
