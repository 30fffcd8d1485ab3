package auth

import (
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// CookieName is the cookie a browser keeps the cluster token in once it
// logged in to the dashboard (HttpOnly, SameSite=Strict).
const CookieName = "goray_token"

// HTTPHandler wraps next with the cluster's token check, the same as every
// gRPC service's: a request passes when it carries the token as
// "Authorization: Bearer <token>" or in the CookieName cookie, or when no
// token is required. Any other request gets 401 with a message that says
// how to pass the token, and the refusal is logged once per peer per
// minute. A panic of next is turned into a 500, logged with its stack,
// like a gRPC handler's.
func (c *Credentials) HTTPHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := c.CheckHTTP(r); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="goray"`)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var perr error
		func() {
			defer c.recoverCall("HTTP "+r.Method+" "+r.URL.Path, &perr)
			next.ServeHTTP(w, r)
		}()
		if perr != nil {
			http.Error(w, perr.Error(), http.StatusInternalServerError)
		}
	})
}

// CheckHTTP returns nil when r carries the cluster token (see
// HTTPHandler) or none is required; otherwise an error that says why,
// without the token, and the refusal is logged once per peer per minute.
func (c *Credentials) CheckHTTP(r *http.Request) error {
	if !c.Enabled() {
		return nil
	}
	why := "no token"
	if h := r.Header.Get("Authorization"); h != "" {
		got, ok := strings.CutPrefix(h, bearerPrefix)
		if ok && subtle.ConstantTimeCompare([]byte(got), c.token) == 1 {
			return nil
		}
		why = "wrong token"
	} else if ck, err := r.Cookie(CookieName); err == nil {
		if subtle.ConstantTimeCompare([]byte(ck.Value), c.token) == 1 {
			return nil
		}
		why = "wrong token"
	}
	peer := r.RemoteAddr
	if h, _, err := net.SplitHostPort(peer); err == nil {
		peer = h
	}
	c.logRefusal(peer, "HTTP "+r.URL.Path, why)
	return fmt.Errorf("goray: %s: this cluster requires its token: send \"Authorization: Bearer <token>\" (the head keeps it in ~/.goray/auth_token; $%s or $%s for the goray CLI)", why, EnvToken, EnvTokenPath)
}

// CheckToken reports whether token is the cluster's token (constant
// time); with no token required, any token is.
func (c *Credentials) CheckToken(token string) bool {
	if !c.Enabled() {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(token), c.token) == 1
}

// ServerTLSConfig returns the TLS config an HTTP server of the node
// listens with (mutual TLS off: browsers and Prometheus authenticate with
// the token), or nil when TLS is not configured.
func (c *Credentials) ServerTLSConfig() *tls.Config {
	if !c.TLS() {
		return nil
	}
	cfg := c.srv.Clone()
	cfg.ClientAuth = tls.NoClientCert
	return cfg
}

// HTTPTransport returns an HTTP transport that trusts the cluster's CA
// and presents this node's certificate when TLS is configured, for the
// CLI's calls to a node's HTTP endpoints; nil means http.DefaultTransport.
func (c *Credentials) HTTPTransport() http.RoundTripper {
	if !c.TLS() || c.cli == nil {
		return nil
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = c.cli.Clone()
	return t
}

// SetHTTPAuth puts the token on an outgoing HTTP request (nothing when no
// token is used).
func (c *Credentials) SetHTTPAuth(r *http.Request) {
	if c.Enabled() {
		r.Header.Set("Authorization", bearerPrefix+string(c.token))
	}
}
