package gcs

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// KVPut stores value under (ns, key). With overwrite=false an existing key is
// kept and Added is false. Added is true when the key did not exist before.
// Namespaces, keys and values are bounded (InvalidArgumentError), and so is
// what a namespace and the whole store hold (QuotaExceededError); see
// KVLimits.
func (s *Server) KVPut(ctx context.Context, req *gorayv1.KVPutRequest) (_ *gorayv1.KVPutReply, err error) {
	var d durable
	defer d.wait(ctx, &err) // after the unlock below: answer once the change is durable
	ns, key, value := req.GetNs(), req.GetKey(), req.GetValue()
	if err := s.kvLimits.checkEntry(ns, key, value); err != nil {
		return nil, err
	}
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	_, exists := s.kv[ns][key]
	if exists && !req.GetOverwrite() {
		return &gorayv1.KVPutReply{Added: false}, nil
	}
	if err := s.kvSetLocked(ns, key, slices.Clone(value)); err != nil {
		return nil, err
	}
	if s.journal != nil {
		s.journal.putRaw(tableKV, kvRecordKey(ns, key), value)
		d = s.durableNow()
	}
	return &gorayv1.KVPutReply{Added: !exists}, nil
}

// checkEntry checks a KV entry against the limits: a key is required, and
// the namespace, key and value are bounded (InvalidArgumentError). KVPut
// checks what it is asked to store with it, and a GCS what it reads back
// from its storage.
func (l KVLimits) checkEntry(ns, key string, value []byte) error {
	if key == "" {
		return &InvalidArgumentError{Field: "key", Problem: "required"}
	}
	if err := l.checkNamespace(ns); err != nil {
		return err
	}
	if err := l.checkKey("key", ns, key); err != nil {
		return err
	}
	if len(value) > l.MaxValueSize {
		return &InvalidArgumentError{Field: "value", Problem: fmt.Sprintf("the value of key %q in namespace %q is %d bytes; the limit is %d bytes",
			clip(key), clip(ns), len(value), l.MaxValueSize)}
	}
	return nil
}

// kvSetLocked stores value (which the store keeps: the caller gives it
// up) under (ns, key) within the quotas, or changes nothing and returns a
// QuotaExceededError. s.kvMu must be held.
func (s *Server) kvSetLocked(ns, key string, value []byte) error {
	l := s.kvLimits
	m := s.kv[ns]
	old, exists := m[key]
	use := s.kvUse[ns]
	if use == nil {
		use = &kvUsage{}
	}
	delta, keys := kvCost(key, value), use.keys+1
	if exists {
		delta -= kvCost(key, old)
		keys--
	}
	if m == nil {
		delta += kvNamespaceCost(ns)
	}
	quota := func(store bool, unit string, held, want, limit int64) error {
		return &QuotaExceededError{Namespace: ns, Key: key, Store: store, Unit: unit, Held: held, Want: want, Limit: limit}
	}
	switch {
	case keys > l.NamespaceKeys:
		return quota(false, "keys", int64(use.keys), int64(keys), int64(l.NamespaceKeys))
	case use.bytes+delta > l.NamespaceBytes:
		return quota(false, "bytes", use.bytes, use.bytes+delta, l.NamespaceBytes)
	case s.kvTotal+delta > l.TotalBytes:
		return quota(true, "bytes", s.kvTotal, s.kvTotal+delta, l.TotalBytes)
	}
	if m == nil {
		m = map[string][]byte{}
		s.kv[ns] = m
	}
	s.kvUse[ns] = use
	m[key] = value
	use.bytes += delta
	use.keys = keys
	s.kvTotal += delta
	return nil
}

// kvDeleteLocked deletes key from namespace ns, whose map is m, and
// updates the quotas; s.kvMu must be held.
func (s *Server) kvDeleteLocked(ns string, m map[string][]byte, key string) {
	cost := kvCost(key, m[key])
	delete(m, key)
	if s.journal != nil {
		s.journal.del(tableKV, kvRecordKey(ns, key))
	}
	if use := s.kvUse[ns]; use != nil {
		use.bytes -= cost
		use.keys--
	}
	s.kvTotal -= cost
}

// KVGet returns the value of (ns, key) and whether it exists.
func (s *Server) KVGet(_ context.Context, req *gorayv1.KVGetRequest) (*gorayv1.KVGetReply, error) {
	if req.GetKey() == "" {
		return nil, &InvalidArgumentError{Field: "key", Problem: "required"}
	}
	if err := s.kvLimits.checkNamespace(req.GetNs()); err != nil {
		return nil, err
	}
	if err := s.kvLimits.checkKey("key", req.GetNs(), req.GetKey()); err != nil {
		return nil, err
	}
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	v, ok := s.kv[req.GetNs()][req.GetKey()]
	if !ok {
		return &gorayv1.KVGetReply{}, nil
	}
	return &gorayv1.KVGetReply{Found: true, Value: slices.Clone(v)}, nil
}

// KVDel deletes (ns, key), or with by_prefix every key of ns starting with
// key (an empty prefix deletes the whole namespace). It returns how many keys
// were deleted.
func (s *Server) KVDel(ctx context.Context, req *gorayv1.KVDelRequest) (_ *gorayv1.KVDelReply, err error) {
	var d durable
	defer d.wait(ctx, &err) // after the unlock below: answer once the change is durable
	if req.GetKey() == "" && !req.GetByPrefix() {
		return nil, &InvalidArgumentError{Field: "key", Problem: "required unless by_prefix is set"}
	}
	if err := s.kvLimits.checkNamespace(req.GetNs()); err != nil {
		return nil, err
	}
	if err := s.kvLimits.checkKey("key", req.GetNs(), req.GetKey()); err != nil {
		return nil, err
	}
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	ns := req.GetNs()
	m := s.kv[ns]
	var n int64
	if req.GetByPrefix() {
		for k := range m {
			if strings.HasPrefix(k, req.GetKey()) {
				s.kvDeleteLocked(ns, m, k)
				n++
			}
		}
	} else if _, ok := m[req.GetKey()]; ok {
		s.kvDeleteLocked(ns, m, req.GetKey())
		n = 1
	}
	if m != nil && len(m) == 0 {
		delete(s.kv, ns)
		if use := s.kvUse[ns]; use != nil {
			s.kvTotal -= use.bytes // the namespace's own cost
		}
		delete(s.kvUse, ns)
	}
	d = s.durableNow()
	return &gorayv1.KVDelReply{Deleted: n}, nil
}

// KVKeys returns the keys of ns that start with prefix, sorted.
func (s *Server) KVKeys(_ context.Context, req *gorayv1.KVKeysRequest) (*gorayv1.KVKeysReply, error) {
	if err := s.kvLimits.checkNamespace(req.GetNs()); err != nil {
		return nil, err
	}
	if err := s.kvLimits.checkKey("prefix", req.GetNs(), req.GetPrefix()); err != nil {
		return nil, err
	}
	s.kvMu.Lock()
	keys := []string{}
	for k := range s.kv[req.GetNs()] {
		if strings.HasPrefix(k, req.GetPrefix()) {
			keys = append(keys, k)
		}
	}
	s.kvMu.Unlock()
	slices.Sort(keys)
	return &gorayv1.KVKeysReply{Keys: keys}, nil
}
