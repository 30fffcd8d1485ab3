package config

import (
	"os"
	"path/filepath"

	"github.com/hashicorp/hcl/v2"
)

// Auth is the auth block: how the node checks its callers.
//
//	auth {
//	  mode       = "token"                 # or "disabled" (trusted networks only)
//	  token_file = "/etc/goray/auth_token" # default ~/.goray/auth_token
//	}
type Auth struct {
	// Mode is "token" (the default; "" means it) or "disabled".
	Mode string
	// TokenFile is where the cluster token is kept; "" means
	// $GORAY_AUTH_TOKEN_PATH, else ~/.goray/auth_token. The head creates it
	// when missing. A relative path is relative to the config file.
	TokenFile string
}

// TLS is the tls block: mutual TLS on TCP connections between processes
// (gRPC and the object data plane). All three files are PEM; relative
// paths are relative to the config file.
//
//	tls {
//	  ca_file   = "certs/ca.pem"
//	  cert_file = "certs/node1.pem"
//	  key_file  = "certs/node1-key.pem"
//	}
type TLS struct {
	CAFile, CertFile, KeyFile string
}

// Auth modes.
const (
	AuthModeToken    = "token"
	AuthModeDisabled = "disabled"
)

const (
	keyAuthMode      = "auth.mode"
	keyAuthTokenFile = "auth.token_file"
	keyTLSCA         = "tls.ca_file"
	keyTLSCert       = "tls.cert_file"
	keyTLSKey        = "tls.key_file"
)

var authSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "mode"}, {Name: "token_file"}},
}

var tlsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "ca_file", Required: true},
		{Name: "cert_file", Required: true},
		{Name: "key_file", Required: true},
	},
}

// security decodes the auth and tls blocks (either may be nil).
func (d *decoder) security(authBlock, tlsBlock *hcl.Block) {
	n := d.n
	if authBlock != nil {
		c := d.content(authBlock.Body, authSchema)
		d.str(c.Attributes["mode"], keyAuthMode, &n.Auth.Mode)
		d.str(c.Attributes["token_file"], keyAuthTokenFile, &n.Auth.TokenFile)
		n.Auth.TokenFile = d.relPath(n.Auth.TokenFile)
	}
	if tlsBlock != nil {
		c := d.content(tlsBlock.Body, tlsSchema)
		t := &TLS{}
		d.str(c.Attributes["ca_file"], keyTLSCA, &t.CAFile)
		d.str(c.Attributes["cert_file"], keyTLSCert, &t.CertFile)
		d.str(c.Attributes["key_file"], keyTLSKey, &t.KeyFile)
		t.CAFile, t.CertFile, t.KeyFile = d.relPath(t.CAFile), d.relPath(t.CertFile), d.relPath(t.KeyFile)
		n.TLS = t
	}
}

// relPath makes a path from the file relative to the file's directory,
// and absolute: the node hands such paths to processes that run in other
// directories (workers, plugins, the GCS process, node.json's readers).
func (d *decoder) relPath(p string) string {
	if p == "" || filepath.IsAbs(p) || d.n.Filename == "" {
		return p
	}
	return absPath(filepath.Join(filepath.Dir(d.n.Filename), p))
}

// absPath makes p absolute against the working directory; p unchanged
// when that fails.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// security checks the auth and tls blocks: a known mode, and TLS files that
// exist (a missing certificate is found at load, not at the first
// connection).
func (v *validator) security() {
	n := v.n
	switch n.Auth.Mode {
	case "", AuthModeToken, AuthModeDisabled:
	default:
		v.errorf(keyAuthMode, "Unknown auth mode",
			"auth.mode is %q; it must be %q (the default) or %q (only on a network you trust: anyone who reaches the node's ports can run code on it).",
			n.Auth.Mode, AuthModeToken, AuthModeDisabled)
	}
	if n.TLS == nil {
		return
	}
	for _, f := range []struct{ key, path string }{{keyTLSCA, n.TLS.CAFile}, {keyTLSCert, n.TLS.CertFile}, {keyTLSKey, n.TLS.KeyFile}} {
		if f.path == "" {
			v.errorf(f.key, "Missing TLS file", "%s is empty; TLS needs a CA certificate, a certificate and its key (make them with `goray cert`).", f.key)
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			v.errorf(f.key, "TLS file not found", "%s: %v.", f.key, err)
		}
	}
}
