package store

import (
	"context"
	"maps"
	"sync"
)

// Memory is a Store in this process's memory: nothing survives it.
type Memory struct {
	mu     sync.RWMutex
	closed bool
	tables map[string]map[string][]byte
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{tables: map[string]map[string][]byte{}} }

var _ Store = (*Memory)(nil)

// Put implements Store.
func (m *Memory) Put(ctx context.Context, table string, values map[string][]byte) error {
	if err := CheckTable(table); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	t := m.tables[table]
	if t == nil {
		t = map[string][]byte{}
		m.tables[table] = t
	}
	for k, v := range values {
		t[k] = append([]byte(nil), v...)
	}
	return nil
}

// Delete implements Store.
func (m *Memory) Delete(ctx context.Context, table string, keys ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	for _, k := range keys {
		delete(m.tables[table], k)
	}
	return nil
}

// Apply implements Store.
func (m *Memory) Apply(ctx context.Context, batch []Write) error {
	if err := CheckBatch(batch); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	for _, w := range batch {
		t := m.tables[w.Table]
		if w.Delete {
			delete(t, w.Key)
			continue
		}
		if t == nil {
			t = map[string][]byte{}
			m.tables[w.Table] = t
		}
		t[w.Key] = append([]byte(nil), w.Value...)
	}
	return nil
}

// Get implements Store.
func (m *Memory) Get(ctx context.Context, table, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, ErrClosed
	}
	v, ok := m.tables[table][key]
	if !ok {
		return nil, NotFound(table, key)
	}
	return append([]byte(nil), v...), nil
}

// GetAll implements Store.
func (m *Memory) GetAll(ctx context.Context, table string) (map[string][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, ErrClosed
	}
	out := make(map[string][]byte, len(m.tables[table]))
	for k, v := range maps.All(m.tables[table]) {
		out[k] = append([]byte(nil), v...)
	}
	return out, nil
}

// Health implements Store.
func (m *Memory) Health(context.Context) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return ErrClosed
	}
	return nil
}

// Describe implements Store.
func (m *Memory) Describe() string { return "memory (not durable)" }

// Close implements Store.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.tables = nil
	return nil
}
