package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// lockTimeout bounds waiting for the file lock another process holds.
const lockTimeout = 2 * time.Second

// Bolt is a Store in one bbolt file: a bucket per table. Each Put, Delete
// and Apply is one transaction, fsynced before it returns (the GCS's
// journal batches changes itself, so one writer commits each batch at
// once). The file is locked, so two GCSs cannot open the same data
// directory.
type Bolt struct {
	path string
	db   *bolt.DB

	mu     sync.RWMutex // guards closed against Close racing calls
	closed bool
}

var _ Store = (*Bolt)(nil)

// OpenBolt opens (creating) the store at path, with the directory made
// 0700 and the file 0600. It fails with an *OpenError naming the path when
// the file cannot be created, is not a bbolt file, or another process
// holds it.
func OpenBolt(path string) (*Bolt, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, &OpenError{Backend: "bolt", Where: path, Err: err}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			err = fmt.Errorf("another process (a GCS of this data directory still running?) holds its lock: %w", err)
		}
		return nil, &OpenError{Backend: "bolt", Where: path, Err: err}
	}
	return &Bolt{path: path, db: db}, nil
}

// Path returns the file's path.
func (b *Bolt) Path() string { return b.path }

// run runs fn unless the store is closed or ctx ended. bbolt calls do not
// take a context; they are local and short.
func (b *Bolt) run(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	return fn()
}

// Put implements Store.
func (b *Bolt) Put(ctx context.Context, table string, values map[string][]byte) error {
	if err := CheckTable(table); err != nil {
		return err
	}
	return b.run(ctx, func() error {
		return b.db.Update(func(tx *bolt.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte(table))
			if err != nil {
				return err
			}
			for k, v := range values {
				if err := bk.Put([]byte(k), v); err != nil {
					return fmt.Errorf("table %s key %q: %w", table, k, err)
				}
			}
			return nil
		})
	})
}

// Delete implements Store.
func (b *Bolt) Delete(ctx context.Context, table string, keys ...string) error {
	return b.run(ctx, func() error {
		return b.db.Update(func(tx *bolt.Tx) error {
			bk := tx.Bucket([]byte(table))
			if bk == nil {
				return nil
			}
			for _, k := range keys {
				if err := bk.Delete([]byte(k)); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// Apply implements Store: one transaction.
func (b *Bolt) Apply(ctx context.Context, batch []Write) error {
	if err := CheckBatch(batch); err != nil {
		return err
	}
	return b.run(ctx, func() error {
		return b.db.Update(func(tx *bolt.Tx) error {
			for _, w := range batch {
				bk, err := tx.CreateBucketIfNotExists([]byte(w.Table))
				if err != nil {
					return err
				}
				if w.Delete {
					err = bk.Delete([]byte(w.Key))
				} else {
					err = bk.Put([]byte(w.Key), w.Value)
				}
				if err != nil {
					return fmt.Errorf("table %s key %q: %w", w.Table, w.Key, err)
				}
			}
			return nil
		})
	})
}

// Get implements Store.
func (b *Bolt) Get(ctx context.Context, table, key string) ([]byte, error) {
	var out []byte
	err := b.run(ctx, func() error {
		return b.db.View(func(tx *bolt.Tx) error {
			bk := tx.Bucket([]byte(table))
			if bk == nil {
				return NotFound(table, key)
			}
			v := bk.Get([]byte(key))
			if v == nil {
				return NotFound(table, key)
			}
			out = append([]byte(nil), v...)
			return nil
		})
	})
	return out, err
}

// GetAll implements Store.
func (b *Bolt) GetAll(ctx context.Context, table string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := b.run(ctx, func() error {
		return b.db.View(func(tx *bolt.Tx) error {
			bk := tx.Bucket([]byte(table))
			if bk == nil {
				return nil
			}
			return bk.ForEach(func(k, v []byte) error {
				out[string(k)] = append([]byte(nil), v...)
				return nil
			})
		})
	})
	return out, err
}

// Health implements Store.
func (b *Bolt) Health(ctx context.Context) error {
	return b.run(ctx, func() error { return b.db.View(func(*bolt.Tx) error { return nil }) })
}

// Describe implements Store.
func (b *Bolt) Describe() string { return "bolt " + b.path }

// Close implements Store.
func (b *Bolt) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return b.db.Close()
}
