package auth

import (
	"errors"
	"fmt"
	"strings"
)

// TLS problems a failed connection can show, as TLSError.Problem.
const (
	// TLSClientPlain: this side has no TLS and the server speaks TLS.
	TLSClientPlain = "client-plain"
	// TLSServerPlain: this side speaks TLS and the server does not.
	TLSServerPlain = "server-plain"
	// TLSHandshake: both speak TLS and the handshake failed (a
	// certificate of another CA, an expired one).
	TLSHandshake = "handshake"
)

// TLSError says that a connection to Address failed because of TLS: the
// two sides disagree on whether to use it, or its handshake failed. It
// wraps the connection's error (a gRPC status, whose text is all that says
// so: "error reading server preface: EOF", "first record does not look
// like a TLS handshake", "tls: ..."). Get one from ExplainTLS.
type TLSError struct {
	// Address is the server's.
	Address string
	// Problem is TLSClientPlain, TLSServerPlain or TLSHandshake.
	Problem string
	// Err is the connection's error.
	Err error
}

// Error says what is wrong with TLS and how to set it.
func (e *TLSError) Error() string {
	var what, hint string
	switch e.Problem {
	case TLSClientPlain:
		what = "TLS mismatch: the server at %s speaks TLS and this process has no TLS settings"
		hint = "give it the cluster's certificates: a tls block (ca_file, cert_file, key_file) in the node's config file, or " +
			EnvTLSCA + ", " + EnvTLSCert + " and " + EnvTLSKey + " for a driver or a command"
	case TLSServerPlain:
		what = "TLS mismatch: this process speaks TLS and the server at %s does not"
		hint = "give every node of the cluster the same tls block, or remove this process's: its config's tls block, or " +
			EnvTLSCA + ", " + EnvTLSCert + " and " + EnvTLSKey
	default:
		what = "the TLS handshake with %s failed"
		hint = "are both sides' certificates signed by the cluster's CA (the tls block's ca_file, or " + EnvTLSCA + ")?"
	}
	return fmt.Sprintf(what, e.Address) + fmt.Sprintf(" (%s): %v", hint, e.Err)
}

// Unwrap returns the connection's error.
func (e *TLSError) Unwrap() error { return e.Err }

// ExplainTLS returns err as a *TLSError when it shows a TLS problem on a
// connection to address made by a process with (clientTLS) or without TLS,
// and err unchanged otherwise (nil stays nil). gRPC reports these as
// Unavailable with the transport's text, so the text is what is matched:
//
//   - "error reading server preface" / "before server preface received"
//     from a client without TLS: the server answered the plain HTTP/2
//     preface with a TLS alert, or closed the connection;
//   - "first record does not look like a TLS handshake" (or "tls:
//     ... record") from a TLS client: the server answered in plain HTTP/2;
//   - any other "tls: " text: the handshake itself failed.
func ExplainTLS(address string, clientTLS bool, err error) error {
	if err == nil {
		return nil
	}
	var te *TLSError
	if errors.As(err, &te) {
		return err
	}
	msg := err.Error()
	problem := ""
	switch {
	case !clientTLS && (strings.Contains(msg, "error reading server preface") || strings.Contains(msg, "before server preface received")):
		problem = TLSClientPlain
	case clientTLS && (strings.Contains(msg, "first record does not look like a TLS handshake") || strings.Contains(msg, "tls: oversized record") ||
		strings.Contains(msg, "tls: server selected unsupported protocol")):
		problem = TLSServerPlain
	case clientTLS && strings.Contains(msg, "tls: "):
		problem = TLSHandshake
	default:
		return err
	}
	return &TLSError{Address: address, Problem: problem, Err: err}
}
