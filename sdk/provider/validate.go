package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/goray-dev/goray/sdk/plugin"
)

// Validate checks the rules every launch request follows: a request id, a
// cluster name and a node type, a Count of at least 1, and a NodeConfig
// that is empty or a JSON object. The error matches ErrInvalidRequest and
// names every problem. The SDK's server checks it before the provider sees
// a request; providers call it too, so they behave the same in-process.
func (r *LaunchRequest) Validate() error {
	if r == nil {
		return invalid("no launch request")
	}
	var errs []string
	if r.RequestID == "" {
		errs = append(errs, "the request id is empty")
	}
	if r.ClusterName == "" {
		errs = append(errs, "the cluster name is empty")
	}
	if r.NodeType == "" {
		errs = append(errs, "the node type is empty")
	}
	if r.Count < 1 {
		errs = append(errs, fmt.Sprintf("count is %d; want at least 1", r.Count))
	}
	if _, err := nodeConfigMap(r.NodeConfig); err != nil {
		errs = append(errs, err.Error())
	}
	return joinInvalid(errs)
}

// Validate checks that the request names its cluster and has no empty
// instance id. The error matches ErrInvalidRequest.
func (r *TerminateRequest) Validate() error {
	if r == nil {
		return invalid("no terminate request")
	}
	var errs []string
	if r.ClusterName == "" {
		errs = append(errs, "the cluster name is empty")
	}
	for i, id := range r.InstanceIDs {
		if id == "" {
			errs = append(errs, fmt.Sprintf("instance id %d is empty", i))
		}
	}
	return joinInvalid(errs)
}

// Validate checks that the request names its cluster. The error matches
// ErrInvalidRequest.
func (r *ListRequest) Validate() error {
	if r == nil || r.ClusterName == "" {
		return invalid("the cluster name is empty")
	}
	return nil
}

// Validate checks that the request names its cluster. The error matches
// ErrInvalidRequest.
func (r *PollErrorsRequest) Validate() error {
	if r == nil || r.ClusterName == "" {
		return invalid("the cluster name is empty")
	}
	return nil
}

// maxClusterNameLen is the longest cluster name CheckClusterName takes,
// in bytes: goray's cluster files allow no longer (cluster_name).
const maxClusterNameLen = 64

// clusterName is what CheckClusterName takes.
var clusterName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// CheckClusterName checks the rule goray's cluster files impose on
// cluster_name: 1 to 64 letters, digits, '.', '_' and '-', starting with a
// letter or digit. A provider that names files, directories or instance
// ids after the cluster calls it on every request; the error matches
// ErrInvalidRequest. Validate does not call it: a provider with no such
// use (one whose cloud keeps the name in a tag) may take other names.
func CheckClusterName(name string) error {
	if len(name) > maxClusterNameLen || !clusterName.MatchString(name) {
		return invalid("cluster name %q: use 1 to %d letters, digits, '.', '_' and '-', starting with a letter or digit", name, maxClusterNameLen)
	}
	return nil
}

func joinInvalid(errs []string) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return invalid("%s", errs[0])
	}
	var b bytes.Buffer
	for i, e := range errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e)
	}
	return invalid("%s", b.String())
}

// nodeConfigMap decodes a LaunchRequest's NodeConfig: empty is {}, numbers
// stay json.Number.
func nodeConfigMap(raw []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("node_config is not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("node_config has data after its JSON object")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("node_config is a JSON %s; want an object", jsonKind(v))
	}
	return m, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "bool"
	case json.Number:
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

// DecodeNodeConfig decodes a LaunchRequest's NodeConfig into T, the
// provider's tagged node_config struct (the one whose plugin.SchemaOf it
// returns from NodeConfigSchema): it checks the settings against T's
// schema, fills in defaults and converts values (sizes, durations) as
// plugin.DecodeConfig does. Empty raw is {}. The error matches
// ErrInvalidRequest (and plugin.ErrInvalidConfig for a setting that does
// not fit) and names the setting.
//
//	type NodeConfig struct {
//		MachineType string `hcl:"machine_type,required" doc:"Machine type of the instances."`
//	}
//	nc, err := provider.DecodeNodeConfig[NodeConfig](req.NodeConfig)
func DecodeNodeConfig[T any](raw []byte) (T, error) {
	var zero T
	m, err := nodeConfigMap(raw)
	if err != nil {
		return zero, invalid("%v", err)
	}
	v, err := plugin.DecodeConfig[T](m)
	if err != nil {
		return zero, fmt.Errorf("%w: node_config: %w", ErrInvalidRequest, err)
	}
	return v, nil
}

// NodeConfigSchemaOf answers NodeConfigSchema for a provider whose
// node_config block is the struct T (the same struct DecodeNodeConfig
// decodes into):
//
//	func (c *Cloud) NodeConfigSchema(ctx context.Context, _ *provider.NodeConfigSchemaRequest) (*provider.NodeConfigSchemaResponse, error) {
//		return provider.NodeConfigSchemaOf[NodeConfig](ctx)
//	}
func NodeConfigSchemaOf[T any](ctx context.Context) (*NodeConfigSchemaResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := plugin.SchemaOf[T]()
	if err != nil {
		return nil, err
	}
	return &NodeConfigSchemaResponse{Schema: s}, nil
}
