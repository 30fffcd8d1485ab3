// Package dashboard is the head's HTTP server: the job API (package
// dashboard/jobs) today, and the place the dashboard's pages and state
// JSON mount. It runs in the head's node host (host/node), listens on the
// dashboard block's host and port (127.0.0.1:8265 by default, as Ray's),
// and stops with the node.
//
// Every route goes through the cluster token check
// ((*auth.Credentials).HTTPHandler: a Bearer token or the goray_token
// cookie); with TLS configured the server speaks HTTPS with the node's
// certificate. Routing is net/http's ServeMux with method and wildcard
// patterns ("GET /api/jobs/{id}"), which covers what the API needs
// without a router library.
//
// Bounds: request headers must arrive within ReadHeaderTimeout and fit in
// MaxHeaderBytes; each request's body must be read within RequestTimeout
// (a handler that streams for longer, a binary upload or a followed log,
// moves its own deadlines with http.ResponseController); JSON bodies are
// limited by MaxJSONBody (ReadJSON). Connections are bounded as on every
// goray listener (internal/connlimit): one on which no request has passed
// the token check is closed after a few seconds (a browser on the public
// login page reconnects), and such connections are capped per peer and in
// total; a connection whose request passed the check is kept until
// IdleTimeout.
//
// To mount more (the dashboard's pages, /api/state/...), call Handle
// before Serve; see Server.Handle.
package dashboard

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/connlimit"
	"github.com/hashicorp/go-hclog"
)

// DefaultPort is the dashboard's port when the config names none (Ray's
// 8265).
const DefaultPort = 8265

// Server limits.
const (
	// ReadHeaderTimeout bounds how long a client may take to send a
	// request's headers.
	ReadHeaderTimeout = 10 * time.Second
	// RequestTimeout bounds reading a request's body and writing its
	// answer, unless the handler moves the deadlines (uploads, followed
	// logs).
	RequestTimeout = 60 * time.Second
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout = 2 * time.Minute
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes = 64 << 10
	// MaxJSONBody bounds a JSON request body (ReadJSON).
	MaxJSONBody = 1 << 20
)

// Options configures Listen.
type Options struct {
	// Host is the address to listen on ("" means 127.0.0.1).
	Host string
	// Port is the TCP port: 0 means DefaultPort, -1 a free port. A port
	// that is taken, DefaultPort included, is a PortInUseError: an
	// operator who did not ask for a free port finds the dashboard where
	// the docs say, or learns why not (as `ray start --head` fails when
	// 8265 is taken), instead of on a port nobody announced.
	Port int
	// Auth is the cluster's credentials: every request must carry the
	// token, and TLS (when configured) is served with its certificate.
	Auth *auth.Credentials
	// Logger receives the server's logs (nil discards them).
	Logger hclog.Logger
}

// PortInUseError says the dashboard's port is taken.
type PortInUseError struct {
	Address string
	Err     error
}

// Error names the address and what to do.
func (e *PortInUseError) Error() string {
	return fmt.Sprintf("cannot start the head: the dashboard's address %s is already in use (another goray head or program listens there; stop it with `goray stop`, pick another --dashboard-port (dashboard { port }; -1 for a free one), or turn the dashboard off with --include-dashboard=false)", e.Address)
}

// Unwrap returns the listen error.
func (e *PortInUseError) Unwrap() error { return e.Err }

// Server is the head's HTTP server.
type Server struct {
	lis    net.Listener
	mux    *http.ServeMux
	public *http.ServeMux
	srv    *http.Server
	log    hclog.Logger
	tls    bool
	done   chan struct{}

	mu      sync.Mutex
	serving bool
}

// Listen opens the server's listener; nothing is served until Serve.
func Listen(o Options) (*Server, error) {
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := o.Port
	switch port {
	case 0:
		port = DefaultPort
	case -1:
		port = 0
	}
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	lis, err := net.Listen("tcp", addr)
	if err != nil && errors.Is(err, syscall.EADDRINUSE) {
		return nil, &PortInUseError{Address: addr, Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("the dashboard cannot listen on %s (dashboard { host, port } / --dashboard-host, --dashboard-port): %w", addr, err)
	}
	lis = connlimit.Wrap(lis, connlimit.Options{Name: "dashboard", Logger: log})
	s := &Server{lis: lis, mux: http.NewServeMux(), public: http.NewServeMux(), log: log, done: make(chan struct{})}
	tlsCfg := o.Auth.ServerTLSConfig()
	s.tls = tlsCfg != nil
	s.srv = &http.Server{
		Handler:           withDeadlines(withPublic(s.public, o.Auth.HTTPHandler(connlimit.MarkHandler(sameOrigin(s.mux))))),
		ConnContext:       connlimit.ConnContext,
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	if tlsCfg != nil {
		s.lis = tls.NewListener(lis, tlsCfg)
	}
	return s, nil
}

// withDeadlines gives every request RequestTimeout to send its body and
// get its answer; handlers that stream move the deadlines themselves.
func withDeadlines(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		deadline := time.Now().Add(RequestTimeout)
		_ = rc.SetReadDeadline(deadline)
		_ = rc.SetWriteDeadline(deadline)
		next.ServeHTTP(w, r)
	})
}

// Handle mounts handler on pattern (net/http ServeMux syntax, e.g.
// "GET /api/state/nodes" or "/" for the pages). The token check, the
// deadlines and TLS apply to it like to every route. Call it before
// Serve; it panics on a pattern that conflicts with one already mounted,
// like ServeMux.Handle.
func (s *Server) Handle(pattern string, handler http.Handler) {
	s.mux.Handle(pattern, handler)
}

// HandlePublic mounts handler on pattern WITHOUT the token check: only
// for what a browser needs before it has the token (the dashboard's login
// page and its CSS and JS, package dashboard/ui). A request matching a
// public pattern never reaches the routes mounted with Handle.
func (s *Server) HandlePublic(pattern string, handler http.Handler) {
	s.public.Handle(pattern, handler)
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// URL is the server's base URL (http:// or https://).
func (s *Server) URL() string {
	if s.tls {
		return "https://" + s.Addr()
	}
	return "http://" + s.Addr()
}

// Serve serves until Shutdown; it returns at once.
func (s *Server) Serve() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving {
		return
	}
	s.serving = true
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(s.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("dashboard server stopped", "error", err)
		}
	}()
	s.log.Info("dashboard serving", "url", s.URL())
}

// Shutdown stops the server: no new connection is accepted, requests in
// flight get until ctx ends (streams of followed logs end when their
// handlers see their request's context end), then every connection is
// closed.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	_ = s.lis.Close()
	s.mu.Lock()
	serving := s.serving
	s.mu.Unlock()
	if serving {
		<-s.done
	}
	return err
}

// ErrorBody is the JSON body of every error answer.
type ErrorBody struct {
	// Error says what is wrong and where.
	Error string `json:"error"`
}

// WriteJSON answers with v as JSON and the status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// WriteError answers with an ErrorBody.
func WriteError(w http.ResponseWriter, code int, format string, args ...any) {
	WriteJSON(w, code, ErrorBody{Error: fmt.Sprintf(format, args...)})
}

// ReadJSON decodes r's body (at most MaxJSONBody bytes, no unknown
// fields, one value) into v. Its errors say what is wrong, naming the
// field and offset a type error occurred at, and whether the body was too
// large (then errors.As finds an *http.MaxBytesError).
func ReadJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, MaxJSONBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		var me *http.MaxBytesError
		switch {
		case errors.As(err, &me):
			return fmt.Errorf("request body larger than %d bytes: %w", me.Limit, err)
		case errors.As(err, &te):
			return fmt.Errorf("field %q: want a JSON %s, got %s (offset %d)", te.Field, te.Type, te.Value, te.Offset)
		case errors.As(err, &se):
			return fmt.Errorf("invalid JSON at offset %d: %v", se.Offset, err)
		case errors.Is(err, io.EOF):
			return errors.New("empty request body: want a JSON object")
		}
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	if dec.More() {
		return errors.New("invalid JSON body: more than one value")
	}
	return nil
}
