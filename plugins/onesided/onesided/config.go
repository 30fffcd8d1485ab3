package onesided

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// Defaults of Config, also the defaults of the config block.
const (
	DefaultChunkSize     = 4 << 20
	DefaultStreams       = 4
	DefaultKVNamespace   = "transport/onesided"
	DefaultSegmentPrefix = shmem.Prefix + "os-"
	DefaultDialTimeout   = 5 * time.Second
)

// Limits of Config.
const (
	MinChunkSize = 64 << 10
	MaxChunkSize = 256 << 20
	MaxStreams   = 64
	maxNameLen   = 128
)

// Config configures an Agent. It is also the plugin's `config { ... }`
// block: its tags give the attributes and their defaults (those of
// DefaultConfig).
type Config struct {
	// Name is the agent's name, unique in the cluster. Empty: the node id
	// (plugin.EnvNodeID, else "node") plus a random suffix.
	Name string `hcl:"name" doc:"Agent name, unique in the cluster (default: the node id plus a random suffix)."`
	// Listen is the read server's TCP address (host:port). Empty: the
	// node's IP (plugin.NodeIP) and a free port.
	Listen string `hcl:"listen" doc:"TCP address of the read server, host:port (default: the node's IP and a free port)."`
	// ChunkSize is the size of one read request over TCP.
	ChunkSize int64 `hcl:"chunk_size,size" default:"4MiB" doc:"Size of one pipelined read request over TCP (64KiB to 256MiB)."`
	// Streams is how many TCP connections one transfer uses at most.
	Streams int `hcl:"streams" default:"4" doc:"TCP connections one transfer uses at most (1 to 64)."`
	// KVNamespace is the namespace of the cluster KV holding agent metadata.
	KVNamespace string `hcl:"kv_namespace" default:"transport/onesided" doc:"Namespace of the cluster KV where agents publish their metadata."`
	// SameNodeSHM lets agents of one shared-memory domain read each other's
	// segments directly; false forces TCP (tests, benchmarks).
	SameNodeSHM bool `hcl:"same_node_shm" default:"true" doc:"Read segments of agents of the same node through shared memory; false forces TCP."`
	// SegmentPrefix starts the names of the segments a Receive allocates;
	// it must start with shmem.Prefix.
	SegmentPrefix string `hcl:"segment_prefix" default:"goray-t-os-" doc:"Name prefix of the shared-memory segments receives allocate; must start with goray-t-."`
	// DialTimeout bounds connecting to a source agent's read server.
	DialTimeout time.Duration `hcl:"dial_timeout" default:"5s" doc:"How long a read may take to connect to the source agent."`
}

// DefaultConfig returns the configuration used when nothing is set.
func DefaultConfig() Config {
	return Config{
		ChunkSize:     DefaultChunkSize,
		Streams:       DefaultStreams,
		KVNamespace:   DefaultKVNamespace,
		SameNodeSHM:   true,
		SegmentPrefix: DefaultSegmentPrefix,
		DialTimeout:   DefaultDialTimeout,
	}
}

// validName reports whether s can name an agent: letters, digits, '.', '_'
// and '-', at most 128 characters.
func validName(s string) error {
	if s == "" || len(s) > maxNameLen {
		return fmt.Errorf("agent name %.40q: want 1 to %d characters", s, maxNameLen)
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("agent name %.40q: only letters, digits, '.', '_' and '-' are allowed", s)
		}
	}
	return nil
}

// Validate checks the configuration; its error names the offending setting.
func (c Config) Validate() error {
	if c.Name != "" {
		if err := validName(c.Name); err != nil {
			return fmt.Errorf("name: %v", err)
		}
	}
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return fmt.Errorf("listen %q: want host:port, e.g. \"10.0.0.5:0\": %v", c.Listen, err)
		}
	}
	if c.ChunkSize < MinChunkSize || c.ChunkSize > MaxChunkSize {
		return fmt.Errorf("chunk_size %d: want %d to %d bytes", c.ChunkSize, MinChunkSize, MaxChunkSize)
	}
	if c.Streams < 1 || c.Streams > MaxStreams {
		return fmt.Errorf("streams %d: want 1 to %d", c.Streams, MaxStreams)
	}
	if c.KVNamespace == "" {
		return fmt.Errorf("kv_namespace must not be empty")
	}
	if !strings.HasPrefix(c.SegmentPrefix, shmem.Prefix) {
		return fmt.Errorf("segment_prefix %q must start with %q", c.SegmentPrefix, shmem.Prefix)
	}
	if err := shmem.ValidName(shmem.NewName(c.SegmentPrefix)); err != nil {
		return fmt.Errorf("segment_prefix %q cannot start a segment name: %v", c.SegmentPrefix, err)
	}
	if c.DialTimeout <= 0 {
		return fmt.Errorf("dial_timeout must be positive, got %v", c.DialTimeout)
	}
	return nil
}

// withDefaults fills the settings that depend on the environment.
func (c Config) withDefaults() Config {
	if c.Name == "" {
		node := os.Getenv(plugin.EnvNodeID)
		if validName(node) != nil || len(node) > maxNameLen-17 {
			node = "node"
		}
		c.Name = node + "-" + randomHex(8)
	}
	if c.Listen == "" {
		c.Listen = net.JoinHostPort(plugin.NodeIP(), "0")
	}
	return c
}

// Schema returns the plugin's config block: name, listen, chunk_size,
// streams, kv_namespace, same_node_shm, segment_prefix and dial_timeout,
// derived from Config.
func Schema() plugin.Schema {
	s, err := plugin.SchemaOf[Config]()
	if err != nil {
		panic(err) // Config's tags are fixed; TestConfigure checks them
	}
	return s
}

// ParseConfig turns a config block (as the host sends it; absent
// attributes take their defaults) into a validated Config.
func ParseConfig(raw map[string]any) (Config, error) {
	c, err := plugin.DecodeConfig[Config](raw)
	if err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
