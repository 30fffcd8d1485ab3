package onesided

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// Metadata and transport data formats, both JSON and parsed strictly
// (unknown fields, a wrong version or inconsistent values are refused).
const (
	metaVersion = 1
	tdVersion   = 1
	// maxMetadata bounds an agent's published metadata (about 150 bytes per
	// registered region).
	maxMetadata = 32 << 20
	// maxTransportData bounds an object's transport data.
	maxTransportData = 4 << 20
)

// AgentKey returns the KV key (in the agent's namespace) of an agent's
// metadata.
func AgentKey(name string) string { return agentKeyPrefix + name }

const agentKeyPrefix = "agents/"

// AgentMetadata is what an agent publishes in the KV under AgentKey(name):
// how to reach it and the regions it has registered.
type AgentMetadata struct {
	V    int    `json:"v"`
	Name string `json:"name"`
	// Incarnation is random per agent start: an agent that restarts under
	// the same name has a new one, and transport data of the old one is
	// refused instead of reading the wrong memory.
	Incarnation string `json:"incarnation"`
	// Version grows whenever the registered regions change.
	Version uint64 `json:"version"`
	// Endpoint is the read server's TCP address.
	Endpoint string `json:"endpoint"`
	// ShmDomain is the agent's shared-memory domain (see ShmDomain).
	ShmDomain string `json:"shm_domain"`
	// Pid and PidNS identify the agent's process, so an agent of the same
	// domain can tell that it died and clean up after it.
	Pid     int          `json:"pid"`
	PidNS   string       `json:"pid_ns,omitempty"`
	Regions []RegionDesc `json:"regions"`
}

// RegionDesc describes one registered region: a whole shared-memory
// segment.
type RegionDesc struct {
	ID      uint64 `json:"id"`
	Segment string `json:"segment"`
	Size    int64  `json:"size"`
	Ino     uint64 `json:"ino"`
	// Owned is set when the agent owns the segment (unlinks it when the
	// registration ends).
	Owned bool `json:"owned,omitempty"`
}

func parseAgentMetadata(name string, data []byte) (*AgentMetadata, error) {
	if len(data) > maxMetadata {
		return nil, badMeta(nil, "metadata of agent %s is %d bytes (limit %d)", name, len(data), maxMetadata)
	}
	var m AgentMetadata
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, badMeta(nil, "metadata of agent %s does not parse: %v", name, err)
	}
	switch {
	case m.V != metaVersion:
		return nil, badMeta(nil, "metadata of agent %s has version %d, want %d", name, m.V, metaVersion)
	case m.Name != name:
		return nil, badMeta(nil, "metadata under agent %s names agent %.40q", name, m.Name)
	case len(m.Incarnation) != 16:
		return nil, badMeta(nil, "metadata of agent %s: bad incarnation %.40q", name, m.Incarnation)
	case m.Endpoint == "":
		return nil, badMeta(nil, "metadata of agent %s has no endpoint", name)
	}
	for _, r := range m.Regions {
		if r.ID == 0 || r.Size <= 0 || shmem.ValidName(r.Segment) != nil {
			return nil, badMeta(nil, "metadata of agent %s: bad region %+v", name, r)
		}
	}
	return &m, nil
}

// region returns the region with this id.
func (m *AgentMetadata) region(id uint64) (RegionDesc, bool) {
	i, ok := slices.BinarySearchFunc(m.Regions, id, func(r RegionDesc, id uint64) int {
		switch {
		case r.ID < id:
			return -1
		case r.ID > id:
			return 1
		}
		return 0
	})
	if !ok {
		return RegionDesc{}, false
	}
	return m.Regions[i], true
}

// transportData is an object's TransportData.
type transportData struct {
	V      int    `json:"v"`
	Object string `json:"object"`
	Source string `json:"source,omitempty"`
	Agent  string `json:"agent"`
	// Inc is the source agent's incarnation.
	Inc string `json:"inc"`
	// Version is the agent's metadata version at extraction: metadata at
	// least that new knows every region below.
	Version uint64 `json:"version"`
	// Key is the extraction's access key (hex): reads must present it.
	Key     string     `json:"key"`
	Tensors []tdTensor `json:"tensors"`

	key uint64
}

// tdTensor is one tensor of transportData: its layout and region
// descriptor.
type tdTensor struct {
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	Device string  `json:"device,omitempty"`
	Reg    uint64  `json:"reg,omitempty"`
	Off    int64   `json:"off,omitempty"`
	Len    int64   `json:"len"`
}

func (t tdTensor) meta() transport.TensorMeta {
	return transport.TensorMeta{DType: transport.DType(t.DType), Shape: slices.Clone(t.Shape), Device: t.Device}
}

func formatKey(k uint64) string { return fmt.Sprintf("%016x", k) }

func parseKey(s string) (uint64, error) {
	if len(s) != 16 {
		return 0, fmt.Errorf("want 16 hex digits")
	}
	k, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, err
	}
	if k == 0 {
		return 0, fmt.Errorf("zero key")
	}
	return k, nil
}

// parseTransportData parses and checks an object's transport data.
func parseTransportData(objectID string, data []byte) (*transportData, error) {
	if len(data) > maxTransportData {
		return nil, badMeta(nil, "transport data of %d bytes is too large", len(data))
	}
	var d transportData
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, badMeta(nil, "transport data does not parse: %v", err)
	}
	if dec.More() {
		return nil, badMeta(nil, "transport data has trailing bytes")
	}
	switch {
	case d.V != tdVersion:
		return nil, badMeta(nil, "transport data version %d, want %d", d.V, tdVersion)
	case d.Object != objectID:
		return nil, badMeta(nil, "transport data is for object %.40q", d.Object)
	case len(d.Inc) != 16:
		return nil, badMeta(nil, "transport data: bad incarnation %.40q", d.Inc)
	case d.Version == 0:
		return nil, badMeta(nil, "transport data: zero metadata version")
	}
	if err := validName(d.Agent); err != nil {
		return nil, badMeta(nil, "transport data: %v", err)
	}
	k, err := parseKey(d.Key)
	if err != nil {
		return nil, badMeta(nil, "transport data: bad key %.40q: %v", d.Key, err)
	}
	d.key = k
	for i, t := range d.Tensors {
		m := t.meta()
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("tensor %d: %w", i, err)
		}
		if m.ByteSize() != t.Len {
			return nil, badMeta(nil, "tensor %d: %s needs %d bytes, descriptor has %d", i, m, m.ByteSize(), t.Len)
		}
		if !m.IsCPU() {
			return nil, badMeta(nil, "tensor %d is on device %q", i, t.Device)
		}
		switch {
		case t.Len == 0 && (t.Reg != 0 || t.Off != 0):
			return nil, badMeta(nil, "tensor %d: empty tensor with a region", i)
		case t.Len > 0 && t.Reg == 0:
			return nil, badMeta(nil, "tensor %d: no registration", i)
		case t.Off < 0 || t.Off > math.MaxInt64-t.Len:
			return nil, badMeta(nil, "tensor %d: bad offset %d", i, t.Off)
		}
	}
	return &d, nil
}

// metas returns the tensors' layouts.
func (d *transportData) metas() []transport.TensorMeta {
	out := make([]transport.TensorMeta, len(d.Tensors))
	for i, t := range d.Tensors {
		out[i] = t.meta()
	}
	return out
}

// desc returns a read descriptor of the object's non-empty tensors
// (destinations unset) and, per tensor, its index in Reads or -1.
func (d *transportData) desc() (ReadDesc, []int) {
	rd := ReadDesc{ObjectID: d.Object, Agent: d.Agent, Incarnation: d.Inc, MinVersion: d.Version, Key: d.key}
	idx := make([]int, len(d.Tensors))
	for i, t := range d.Tensors {
		if t.Len == 0 {
			idx[i] = -1
			continue
		}
		idx[i] = len(rd.Reads)
		rd.Reads = append(rd.Reads, Read{Region: RegionRef{Registration: t.Reg, Offset: t.Off, Length: t.Len}})
	}
	return rd, idx
}
