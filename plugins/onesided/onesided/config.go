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

// Config configures an Agent: the Go form of the plugin's `config { ... }`
// block (see Transport.Schema).
type Config struct {
	// Name is the agent's name, unique in the cluster. Empty: the node id
	// (plugin.EnvNodeID, else "node") plus a random suffix.
	Name string
	// Listen is the read server's TCP address (host:port). Empty: the
	// node's IP (plugin.NodeIP) and a free port.
	Listen string
	// ChunkSize is the size of one read request over TCP.
	ChunkSize int64
	// Streams is how many TCP connections one transfer uses at most.
	Streams int
	// KVNamespace is the namespace of the cluster KV holding agent metadata.
	KVNamespace string
	// SameNodeSHM lets agents of one shared-memory domain read each other's
	// segments directly; false forces TCP (tests, benchmarks).
	SameNodeSHM bool
	// SegmentPrefix starts the names of the segments a Receive allocates;
	// it must start with shmem.Prefix.
	SegmentPrefix string
	// DialTimeout bounds connecting to a source agent's read server.
	DialTimeout time.Duration
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
// streams, kv_namespace, same_node_shm, segment_prefix and dial_timeout.
func Schema() plugin.Schema {
	return plugin.Schema{Attributes: map[string]plugin.Attribute{
		"name": {
			Type: plugin.TypeString, Optional: true,
			Description: "Agent name, unique in the cluster (default: the node id plus a random suffix).",
		},
		"listen": {
			Type: plugin.TypeString, Optional: true,
			Description: "TCP address of the read server, host:port (default: the node's IP and a free port).",
		},
		"chunk_size": {
			Type: plugin.TypeSize, Optional: true, Default: "4MiB",
			Description: "Size of one pipelined read request over TCP (64KiB to 256MiB).",
		},
		"streams": {
			Type: plugin.TypeNumber, Optional: true, Default: DefaultStreams,
			Description: "TCP connections one transfer uses at most (1 to 64).",
		},
		"kv_namespace": {
			Type: plugin.TypeString, Optional: true, Default: DefaultKVNamespace,
			Description: "Namespace of the cluster KV where agents publish their metadata.",
		},
		"same_node_shm": {
			Type: plugin.TypeBool, Optional: true, Default: true,
			Description: "Read segments of agents of the same node through shared memory; false forces TCP.",
		},
		"segment_prefix": {
			Type: plugin.TypeString, Optional: true, Default: DefaultSegmentPrefix,
			Description: "Name prefix of the shared-memory segments receives allocate; must start with " + shmem.Prefix + ".",
		},
		"dial_timeout": {
			Type: plugin.TypeDuration, Optional: true, Default: DefaultDialTimeout.String(),
			Description: "How long a read may take to connect to the source agent.",
		},
	}}
}

// ParseConfig turns a config block (as Configure receives it; absent
// attributes take their defaults) into a validated Config.
func ParseConfig(raw map[string]any) (Config, error) {
	norm, err := plugin.NormalizeConfig(Schema(), raw)
	if err != nil {
		return Config{}, err
	}
	c := DefaultConfig()
	if v, ok := norm["name"].(string); ok {
		c.Name = v
	}
	if v, ok := norm["listen"].(string); ok {
		c.Listen = v
	}
	if v, ok := norm["chunk_size"].(int64); ok {
		c.ChunkSize = v
	}
	if v, ok := norm["streams"].(float64); ok {
		if v != float64(int(v)) {
			return Config{}, fmt.Errorf("streams %v: want a whole number", v)
		}
		c.Streams = int(v)
	}
	if v, ok := norm["kv_namespace"].(string); ok {
		c.KVNamespace = v
	}
	if v, ok := norm["same_node_shm"].(bool); ok {
		c.SameNodeSHM = v
	}
	if v, ok := norm["segment_prefix"].(string); ok {
		c.SegmentPrefix = v
	}
	if v, ok := norm["dial_timeout"].(string); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			return Config{}, fmt.Errorf("dial_timeout: %v", err)
		}
		c.DialTimeout = d
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
