// Package redisstore is the GCS's Redis storage backend: a store.Store in
// a Redis server (a hash per table), over TLS when configured. It is apart
// from package store so that only the programs that run a head with Redis
// storage link a Redis client: importing it registers the backend
// (store.RegisterRedis); `goray` imports it, a program embedding a node
// does not.
package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/goray-dev/goray/gcs/internal/store"
	"github.com/goray-dev/goray/internal/auth"
)

func init() {
	// go-redis prints connection errors on its own; the store returns
	// them instead, and the GCS logs them once.
	redis.SetLogger(quietLogger{})
	store.RegisterRedis(func(ctx context.Context, opts store.RedisOptions) (store.Store, error) {
		r, err := OpenRedis(ctx, opts)
		if err != nil {
			return nil, err
		}
		return r, nil
	})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// ErrTLSVerify says the Redis server's certificate could not be verified
// against the CA and the server name (OpenRedis wraps it).
var ErrTLSVerify = errors.New("TLS verification of the Redis server's certificate failed")

// ErrTLSRefused says the Redis server refused the TLS connection, during
// or right after the handshake: most often it requires a client
// certificate and got none, or one its CA did not sign.
var ErrTLSRefused = errors.New("the Redis server refused this client's TLS connection")

// TLSFileError says a file of the Redis TLS settings cannot be used:
// which setting, the path, and why.
type TLSFileError struct {
	// Setting is ca_file, cert_file or key_file.
	Setting, Path string
	Err           error
}

func (e *TLSFileError) Error() string {
	return fmt.Sprintf("Redis TLS %s %s: %v", e.Setting, e.Path, e.Err)
}

// Unwrap returns the cause.
func (e *TLSFileError) Unwrap() error { return e.Err }

// tlsConfig builds the client configuration of t for a server at
// address: TLS 1.2 or later, the server verified against the CA (or the
// system's roots) and the server name, the client certificate presented
// when there is one.
func tlsConfig(t *store.RedisTLS, address string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return nil, fmt.Errorf("Redis TLS: the server name is the host of the address %q: %w", address, err)
		}
		cfg.ServerName = host
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, &TLSFileError{Setting: "ca_file", Path: t.CAFile, Err: err}
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, &TLSFileError{Setting: "ca_file", Path: t.CAFile, Err: errors.New("holds no PEM certificate")}
		}
	}
	switch {
	case t.CertFile == "" && t.KeyFile == "":
	case t.CertFile == "":
		return nil, &TLSFileError{Setting: "key_file", Path: t.KeyFile, Err: errors.New("a key without a certificate: set cert_file too")}
	case t.KeyFile == "":
		return nil, &TLSFileError{Setting: "cert_file", Path: t.CertFile, Err: errors.New("a certificate without its key: set key_file too")}
	default:
		st, err := os.Stat(t.KeyFile)
		if err != nil {
			return nil, &TLSFileError{Setting: "key_file", Path: t.KeyFile, Err: err}
		}
		// The rule of the cluster's own TLS key (and token): a secret
		// others can read or replace is refused.
		if st.Mode().Perm()&0o077 != 0 {
			return nil, &TLSFileError{Setting: "key_file", Path: t.KeyFile, Err: &auth.InsecureFileError{Path: t.KeyFile, Mode: st.Mode().Perm()}}
		}
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, &TLSFileError{Setting: "cert_file", Path: t.CertFile, Err: fmt.Errorf("loading it with key_file %s: %w", t.KeyFile, err)}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// handshakeTimeout bounds OpenRedis's first TLS handshake, as
// go-redis's default DialTimeout bounds each of its connection attempts.
const handshakeTimeout = 5 * time.Second

// errNoTLSAnswer says a server did not answer a TLS handshake in time.
var errNoTLSAnswer = errors.New("no TLS answer")

// tlsDialer dials TCP and runs the TLS handshake within ctx (go-redis's
// own TLS dialer does not watch the context during the handshake).
func tlsDialer(cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := tls.Client(raw, cfg)
		if err := c.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return c, nil
	}
}

// firstHandshake runs one TLS handshake with the server and sends it a
// PING, so that a TLS problem is reported at once and as it is, rather
// than after go-redis's dial retries. A server that requires a client
// certificate refuses a client without one only after the handshake (TLS
// 1.3): any answer to the PING (+PONG, or -NOAUTH before AUTH) says the
// session was accepted, an error that it was not.
func firstHandshake(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), addr string) error {
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	c, err := dial(hctx, "tcp", addr)
	if err != nil {
		if ctx.Err() == nil && hctx.Err() != nil {
			return fmt.Errorf("%w to the handshake within %s: is %s the server's tls-port? (a Redis port without TLS does not answer a TLS handshake)", errNoTLSAnswer, handshakeTimeout, addr)
		}
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(hctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err = c.Write([]byte("PING\r\n")); err == nil {
		_, err = c.Read(make([]byte, 1))
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case hctx.Err() != nil:
		return fmt.Errorf("%w: the server at %s took the TLS handshake but did not answer a PING within %s", errNoTLSAnswer, addr, handshakeTimeout)
	}
	return fmt.Errorf("%w after the handshake (does it require a client certificate? set cert_file and key_file to one its CA signed): %w", ErrTLSRefused, err)
}

// explain makes a failed first call's error say what went wrong with TLS,
// when it is about TLS: a certificate that does not verify
// (ErrTLSVerify), a server that refused the handshake (ErrTLSRefused), a
// server that does not speak TLS, or, without TLS, a server that closed
// the connection as one serving TLS only does.
func explain(err error, opts store.RedisOptions) error {
	var verr *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	var op *net.OpError
	switch {
	case errors.Is(err, ErrTLSRefused) || errors.Is(err, errNoTLSAnswer):
		// firstHandshake said it already.
	case opts.TLS == nil:
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return fmt.Errorf("%w (the server closed the connection: if it serves TLS only, configure gcs { redis { tls { ... } } })", err)
		}
	case errors.As(err, &verr):
		return fmt.Errorf("%w (is ca_file the CA that signed the server's certificate, and server_name a name the certificate is for?): %w", ErrTLSVerify, err)
	case errors.As(err, &rec):
		return fmt.Errorf("the server does not speak TLS on %s (is it its tls-port?): %w", opts.Address, err)
	case errors.As(err, &op) && op.Op == "remote error":
		return fmt.Errorf("%w (does it require a client certificate? set cert_file and key_file to one its CA signed): %w", ErrTLSRefused, err)
	}
	return err
}

// Redis is a Store in a Redis server: a hash per table. A Put is one
// MULTI/EXEC, so its keys land together; it returns once Redis
// acknowledged it (durable as the server's appendonly/appendfsync say:
// run Redis with appendonly yes for a head that must survive Redis
// restarts).
type Redis struct {
	opts   store.RedisOptions
	c      *redis.Client
	closed atomic.Bool
}

var _ store.Store = (*Redis)(nil)

// OpenRedis connects (over TLS when opts.TLS is set) and checks the
// server answers (PING) within ctx. It fails with an *store.OpenError naming the
// address, wrapping a *TLSFileError for a TLS file that cannot be used,
// ErrTLSVerify for a server certificate that does not verify and
// ErrTLSRefused for a server that refused the handshake.
func OpenRedis(ctx context.Context, opts store.RedisOptions) (*Redis, error) {
	if opts.Prefix == "" {
		opts.Prefix = "goray"
	}
	if opts.Address == "" {
		return nil, &store.OpenError{Backend: "redis", Where: "(no address)", Err: errors.New("an address (host:port) is required")}
	}
	ro := &redis.Options{
		Addr: opts.Address, Username: opts.Username, Password: opts.Password, DB: opts.DB,
		// The GCS retries on its own terms; a call fails fast instead of
		// hanging on a dead server.
		MaxRetries: 1,
	}
	if opts.TLS != nil {
		cfg, err := tlsConfig(opts.TLS, opts.Address)
		if err != nil {
			return nil, &store.OpenError{Backend: "redis", Where: opts.Address, Err: err}
		}
		ro.TLSConfig, ro.Dialer = cfg, tlsDialer(cfg)
		if err := firstHandshake(ctx, ro.Dialer, opts.Address); err != nil {
			return nil, &store.OpenError{Backend: "redis", Where: opts.Address, Err: explain(err, opts)}
		}
	}
	c := redis.NewClient(ro)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, &store.OpenError{Backend: "redis", Where: opts.Address, Err: explain(err, opts)}
	}
	return &Redis{opts: opts, c: c}, nil
}

func (r *Redis) key(table string) string { return r.opts.Prefix + ":" + table }

func (r *Redis) check() error {
	if r.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// Put implements Store.
func (r *Redis) Put(ctx context.Context, table string, values map[string][]byte) error {
	if err := store.CheckTable(table); err != nil {
		return err
	}
	if err := r.check(); err != nil {
		return err
	}
	if len(values) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(values))
	for k, v := range values {
		args = append(args, k, v)
	}
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, r.key(table), args...)
		return nil
	})
	return err
}

// Delete implements Store.
func (r *Redis) Delete(ctx context.Context, table string, keys ...string) error {
	if err := store.CheckTable(table); err != nil {
		return err
	}
	if err := r.check(); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	return r.c.HDel(ctx, r.key(table), keys...).Err()
}

// Apply implements Store: one MULTI/EXEC.
func (r *Redis) Apply(ctx context.Context, batch []store.Write) error {
	if err := store.CheckBatch(batch); err != nil {
		return err
	}
	if err := r.check(); err != nil {
		return err
	}
	if len(batch) == 0 {
		return nil
	}
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, w := range batch {
			if w.Delete {
				p.HDel(ctx, r.key(w.Table), w.Key)
			} else {
				p.HSet(ctx, r.key(w.Table), w.Key, w.Value)
			}
		}
		return nil
	})
	return err
}

// Get implements Store.
func (r *Redis) Get(ctx context.Context, table, key string) ([]byte, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	v, err := r.c.HGet(ctx, r.key(table), key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, store.NotFound(table, key)
	}
	return v, err
}

// GetAll implements Store.
func (r *Redis) GetAll(ctx context.Context, table string) (map[string][]byte, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	m, err := r.c.HGetAll(ctx, r.key(table)).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out, nil
}

// Health implements Store.
func (r *Redis) Health(ctx context.Context) error {
	if err := r.check(); err != nil {
		return err
	}
	return r.c.Ping(ctx).Err()
}

// Describe implements Store.
func (r *Redis) Describe() string {
	if r.opts.TLS != nil {
		return "redis " + r.opts.Address + " (TLS)"
	}
	return "redis " + r.opts.Address
}

// Close implements Store.
func (r *Redis) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	return r.c.Close()
}
