package gcs

import (
	"context"
	"slices"
	"strings"

	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// KVPut stores value under (ns, key). With overwrite=false an existing key is
// kept and Added is false. Added is true when the key did not exist before.
func (s *Server) KVPut(_ context.Context, req *gorayv1.KVPutRequest) (*gorayv1.KVPutReply, error) {
	if req.GetKey() == "" {
		return nil, &InvalidArgumentError{Field: "key", Problem: "required"}
	}
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	m := s.kv[req.GetNs()]
	if m == nil {
		m = map[string][]byte{}
		s.kv[req.GetNs()] = m
	}
	_, exists := m[req.GetKey()]
	if exists && !req.GetOverwrite() {
		return &gorayv1.KVPutReply{Added: false}, nil
	}
	m[req.GetKey()] = slices.Clone(req.GetValue())
	return &gorayv1.KVPutReply{Added: !exists}, nil
}

// KVGet returns the value of (ns, key) and whether it exists.
func (s *Server) KVGet(_ context.Context, req *gorayv1.KVGetRequest) (*gorayv1.KVGetReply, error) {
	if req.GetKey() == "" {
		return nil, &InvalidArgumentError{Field: "key", Problem: "required"}
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
func (s *Server) KVDel(_ context.Context, req *gorayv1.KVDelRequest) (*gorayv1.KVDelReply, error) {
	if req.GetKey() == "" && !req.GetByPrefix() {
		return nil, &InvalidArgumentError{Field: "key", Problem: "required unless by_prefix is set"}
	}
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	m := s.kv[req.GetNs()]
	var n int64
	if req.GetByPrefix() {
		for k := range m {
			if strings.HasPrefix(k, req.GetKey()) {
				delete(m, k)
				n++
			}
		}
	} else if _, ok := m[req.GetKey()]; ok {
		delete(m, req.GetKey())
		n = 1
	}
	if m != nil && len(m) == 0 {
		delete(s.kv, req.GetNs())
	}
	return &gorayv1.KVDelReply{Deleted: n}, nil
}

// KVKeys returns the keys of ns that start with prefix, sorted.
func (s *Server) KVKeys(_ context.Context, req *gorayv1.KVKeysRequest) (*gorayv1.KVKeysReply, error) {
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
