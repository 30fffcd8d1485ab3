package store

import (
	"context"
	"errors"
	"sync"
)

// RedisOptions says where a Redis store is.
type RedisOptions struct {
	// Address is host:port.
	Address string
	// Username and Password authenticate (Redis ACL; Password alone for
	// requirepass). Never logged nor shown.
	Username, Password string
	// DB is the Redis database number.
	DB int
	// Prefix namespaces the keys, so that several clusters can share a
	// server: table t is the hash "<Prefix>:<t>" (default "goray").
	Prefix string
	// TLS, when not nil, reaches the server over TLS.
	TLS *RedisTLS
}

// RedisTLS says how to reach a Redis server over TLS (1.2 or later). The
// files are PEM.
type RedisTLS struct {
	// CAFile is the CA certificate the server's certificate must be
	// signed by; "" trusts the system's roots.
	CAFile string
	// CertFile and KeyFile are this client's certificate and key, for a
	// server that requires client certificates (tls-auth-clients yes):
	// both or neither. The key must be readable by its owner only.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must be for; ""
	// means the host of the address.
	ServerName string
}

// ErrNoRedis says this program does not link the Redis backend.
var ErrNoRedis = errors.New("this program does not link the Redis backend (gcs/redisstore): a head started with `goray start` has it")

var (
	redisMu   sync.Mutex
	redisOpen func(context.Context, RedisOptions) (Store, error)
)

// RegisterRedis sets how OpenRedis opens a Redis store; package
// gcs/redisstore calls it when imported, so that only programs that
// import it link a Redis client.
func RegisterRedis(open func(context.Context, RedisOptions) (Store, error)) {
	redisMu.Lock()
	defer redisMu.Unlock()
	redisOpen = open
}

// OpenRedis opens a Redis store with the registered backend
// (gcs/redisstore's OpenRedis, which says what its errors are), or fails
// with an *OpenError wrapping ErrNoRedis.
func OpenRedis(ctx context.Context, opts RedisOptions) (Store, error) {
	redisMu.Lock()
	open := redisOpen
	redisMu.Unlock()
	if open == nil {
		return nil, &OpenError{Backend: "redis", Where: opts.Address, Err: ErrNoRedis}
	}
	return open(ctx, opts)
}
