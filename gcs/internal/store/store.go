// Package store is the GCS's storage: named tables of keys and byte
// values that outlive the GCS process. Three backends implement Store:
//
//   - Memory: nothing survives the process (the embedded `go run` default,
//     unit tests);
//   - Bolt: an embedded bbolt file in the head's data directory, the
//     default of a started head (no service to run);
//   - Redis: a Redis server, what Ray users run for a highly available
//     head.
//
// A write returns only once it is durable as far as the backend goes (a
// bbolt transaction is fsynced; Redis acknowledged it, durable per the
// server's appendfsync), so the GCS acknowledges nothing it could lose
// to its own crash.
package store

import (
	"context"
	"errors"
	"fmt"
)

// Store is a set of tables of key -> value. Values are opaque bytes (the
// GCS stores protobuf messages). Every method honours its context; all are
// safe for concurrent use.
type Store interface {
	// Put writes each key of values into table, atomically: after a crash
	// either all of them are there or none.
	Put(ctx context.Context, table string, values map[string][]byte) error
	// Delete removes keys from table; absent keys are no error.
	Delete(ctx context.Context, table string, keys ...string) error
	// Apply writes a batch of changes to any tables, in order and
	// atomically: after a crash either all of them are there or none.
	Apply(ctx context.Context, batch []Write) error
	// Get returns the value of key in table, or an error matching
	// ErrNotFound.
	Get(ctx context.Context, table, key string) ([]byte, error)
	// GetAll returns every key and value of table.
	GetAll(ctx context.Context, table string) (map[string][]byte, error)
	// Health reports whether the backend answers now.
	Health(ctx context.Context) error
	// Describe names the backend and where it keeps data, for `goray
	// status` ("bolt /var/lib/goray/gcs.db", "redis 10.0.0.5:6379"); it
	// never includes a password.
	Describe() string
	// Close releases the backend; later calls fail with ErrClosed.
	Close() error
}

// Write is one change of an Apply batch: Value stored under Table/Key, or
// the key deleted.
type Write struct {
	Table, Key string
	Value      []byte
	Delete     bool
}

// NotFound is ErrNotFound naming the table and key.
func NotFound(table, key string) error {
	return fmt.Errorf("%w: table %s, key %q", ErrNotFound, table, key)
}

// CheckBatch refuses changes without a table.
func CheckBatch(batch []Write) error {
	for _, w := range batch {
		if err := CheckTable(w.Table); err != nil {
			return err
		}
	}
	return nil
}

// Errors the backends return, for errors.Is.
var (
	// ErrNotFound: Get of a key that is not in the table.
	ErrNotFound = errors.New("store: key not found")
	// ErrClosed: a call after Close.
	ErrClosed = errors.New("store: closed")
)

// OpenError says a backend could not be opened or reached: the backend,
// where it was looked for (a path or an address) and why.
type OpenError struct {
	Backend string
	Where   string
	Err     error
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("GCS storage: cannot open %s at %s: %v", e.Backend, e.Where, e.Err)
}

// Unwrap returns the cause.
func (e *OpenError) Unwrap() error { return e.Err }

// CheckTable refuses an empty table name, which every backend would
// store differently.
func CheckTable(table string) error {
	if table == "" {
		return errors.New("store: empty table name")
	}
	return nil
}
