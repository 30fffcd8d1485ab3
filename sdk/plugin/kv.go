package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/internal/auth"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// EnvGCSAddress holds the address (host:port) of the cluster's GCS. The
// host sets it for its plugins so that they can rendezvous with their peers
// on other nodes through the cluster's key-value store (ClusterKV).
const EnvGCSAddress = "GORAY_GCS_ADDRESS"

// EnvNodeID holds the hex id of the node whose host started the plugin.
const EnvNodeID = "GORAY_NODE_ID"

// EnvNodeIP holds the IP address of the node: plugins that open their own
// network listeners bind to it and advertise it to their peers. Empty means
// 127.0.0.1.
const EnvNodeIP = "GORAY_NODE_IP"

// EnvGorayBinary holds the path of the goray binary running the node
// whose host started the plugin, when it is one (empty in embedded nodes):
// a provider that starts nodes on this machine runs that binary.
const EnvGorayBinary = "GORAY_BINARY"

// NodeIP returns EnvNodeIP, or 127.0.0.1 when it is not set.
func NodeIP() string {
	if ip := os.Getenv(EnvNodeIP); ip != "" {
		return ip
	}
	return "127.0.0.1"
}

// ErrKeyNotFound is returned by KV.Get for a key that is not there.
var ErrKeyNotFound = errors.New("key not found")

// KV is the cluster's key-value store as plugins see it: the place where
// peers publish endpoints and metadata (a collective group's rendezvous, a
// one-sided agent's registered memory). Keys live in a namespace per
// store; values are opaque bytes. Methods may be called concurrently.
type KV interface {
	// Put stores value under key, replacing what was there.
	Put(ctx context.Context, key string, value []byte) error
	// Get returns the value under key, or an error matching ErrKeyNotFound.
	Get(ctx context.Context, key string) ([]byte, error)
	// Delete removes key; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// Keys lists the keys that start with prefix, sorted.
	Keys(ctx context.Context, prefix string) ([]string, error)
}

// NewMemoryKV returns a KV held in memory, for tests of one process.
func NewMemoryKV() KV { return &memoryKV{m: map[string][]byte{}} }

type memoryKV struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (k *memoryKV) Put(ctx context.Context, key string, value []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m[key] = append([]byte(nil), value...)
	return nil
}

func (k *memoryKV) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.m[key]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrKeyNotFound, key)
	}
	return append([]byte(nil), v...), nil
}

func (k *memoryKV) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, key)
	return nil
}

func (k *memoryKV) Keys(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var keys []string
	for key := range k.m {
		if strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// ClusterKV connects to the GCS named by EnvGCSAddress and returns its
// key-value store, restricted to namespace ns (for example
// "transport/collective"). Close releases the connection.
func ClusterKV(ns string) (KV, func() error, error) {
	addr := os.Getenv(EnvGCSAddress)
	if addr == "" {
		return nil, nil, fmt.Errorf("%s is not set: the plugin was not started by a goray node", EnvGCSAddress)
	}
	return DialKV(addr, ns)
}

// DialKV connects to the GCS at addr (host:port) and returns its key-value
// store restricted to namespace ns, and a function closing the connection.
// It presents the cluster token and TLS files the node put in the plugin's
// environment (as AuthenticateServer and AuthenticateClient do).
func DialKV(addr, ns string) (KV, func() error, error) {
	creds, err := auth.FromEnv()
	if err != nil {
		return nil, nil, err
	}
	cc, err := grpc.NewClient(addr, creds.DialOptions(addr)...)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to the GCS at %s: %w", addr, err)
	}
	return &gcsKV{c: gorayv1.NewGcsClient(cc), ns: ns}, cc.Close, nil
}

type gcsKV struct {
	c  gorayv1.GcsClient
	ns string
}

func (k *gcsKV) Put(ctx context.Context, key string, value []byte) error {
	_, err := k.c.KVPut(ctx, &gorayv1.KVPutRequest{Ns: k.ns, Key: key, Value: value, Overwrite: true})
	return err
}

func (k *gcsKV) Get(ctx context.Context, key string) ([]byte, error) {
	rep, err := k.c.KVGet(ctx, &gorayv1.KVGetRequest{Ns: k.ns, Key: key})
	if err != nil {
		return nil, err
	}
	if !rep.GetFound() {
		return nil, fmt.Errorf("%w: %q", ErrKeyNotFound, key)
	}
	return rep.GetValue(), nil
}

func (k *gcsKV) Delete(ctx context.Context, key string) error {
	_, err := k.c.KVDel(ctx, &gorayv1.KVDelRequest{Ns: k.ns, Key: key})
	return err
}

func (k *gcsKV) Keys(ctx context.Context, prefix string) ([]string, error) {
	rep, err := k.c.KVKeys(ctx, &gorayv1.KVKeysRequest{Ns: k.ns, Prefix: prefix})
	if err != nil {
		return nil, err
	}
	keys := rep.GetKeys()
	sort.Strings(keys)
	return keys, nil
}
