package metrics

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/goray-dev/goray/internal/auth"
)

// Path is where a node serves its metrics.
const Path = "/metrics"

// scrapeTimeout bounds one scrape's gathering; maxInFlight bounds the
// scrapes served at once (more get 503).
const (
	scrapeTimeout = 10 * time.Second
	maxInFlight   = 4
)

// Server serves a registry's metrics over HTTP.
type Server struct {
	srv  *http.Server
	lis  net.Listener
	done chan struct{}
}

// Handler returns the /metrics handler of g, behind creds' token check
// (auth.Credentials.HTTPHandler): a scrape without the token gets 401.
func Handler(g prometheus.Gatherer, creds *auth.Credentials, logger hclog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:            logger.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: maxInFlight,
		Timeout:             scrapeTimeout,
	}))
	return creds.HTTPHandler(mux)
}

// Serve serves g's metrics at Path on lis until Close, behind creds'
// token check, with TLS (creds.ServerTLSConfig) when the cluster has it
// and lis is TCP.
func Serve(lis net.Listener, g prometheus.Gatherer, creds *auth.Credentials, logger hclog.Logger) *Server {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if cfg := creds.ServerTLSConfig(); cfg != nil && lis.Addr().Network() == "tcp" {
		lis = tls.NewListener(lis, cfg)
	}
	s := &Server{
		srv: &http.Server{
			Handler:           Handler(g, creds, logger),
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      scrapeTimeout + 20*time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          log.New(logger.StandardWriter(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}), "", 0),
		},
		lis:  lis,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("the metrics endpoint stopped", "address", lis.Addr().String(), "error", err)
		}
	}()
	return s
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Close stops the server: it waits for scrapes being answered until ctx
// ends, then closes their connections.
func (s *Server) Close(ctx context.Context) error {
	if s == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	<-s.done
	return err
}
