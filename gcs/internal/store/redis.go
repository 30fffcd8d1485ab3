package store

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

func init() {
	// go-redis prints connection errors on its own; the store returns
	// them instead, and the GCS logs them once.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

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
}

// Redis is a Store in a Redis server: a hash per table. A Put is one
// MULTI/EXEC, so its keys land together; it returns once Redis
// acknowledged it (durable as the server's appendonly/appendfsync say:
// run Redis with appendonly yes for a head that must survive Redis
// restarts).
type Redis struct {
	opts   RedisOptions
	c      *redis.Client
	closed atomic.Bool
}

var _ Store = (*Redis)(nil)

// OpenRedis connects and checks the server answers (PING) within ctx. It
// fails with an *OpenError naming the address.
func OpenRedis(ctx context.Context, opts RedisOptions) (*Redis, error) {
	if opts.Prefix == "" {
		opts.Prefix = "goray"
	}
	if opts.Address == "" {
		return nil, &OpenError{Backend: "redis", Where: "(no address)", Err: errors.New("an address (host:port) is required")}
	}
	c := redis.NewClient(&redis.Options{
		Addr: opts.Address, Username: opts.Username, Password: opts.Password, DB: opts.DB,
		// The GCS retries on its own terms; a call fails fast instead of
		// hanging on a dead server.
		MaxRetries: 1,
	})
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, &OpenError{Backend: "redis", Where: opts.Address, Err: err}
	}
	return &Redis{opts: opts, c: c}, nil
}

func (r *Redis) key(table string) string { return r.opts.Prefix + ":" + table }

func (r *Redis) check() error {
	if r.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Put implements Store.
func (r *Redis) Put(ctx context.Context, table string, values map[string][]byte) error {
	if err := checkTable(table); err != nil {
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
	if err := checkTable(table); err != nil {
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
func (r *Redis) Apply(ctx context.Context, batch []Write) error {
	if err := checkBatch(batch); err != nil {
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
		return nil, notFound(table, key)
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
func (r *Redis) Describe() string { return "redis " + r.opts.Address }

// Close implements Store.
func (r *Redis) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	return r.c.Close()
}
