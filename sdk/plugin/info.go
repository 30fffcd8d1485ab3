package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/proto/pluginv1"
)

// infoServer serves the common PluginInfo service.
type infoServer struct {
	pluginv1.UnimplementedPluginInfoServer
	cfg        ServeConfig
	log        hclog.Logger
	negotiated atomic.Int32
}

func newInfoServer(cfg ServeConfig, log hclog.Logger) *infoServer {
	return &infoServer{cfg: cfg, log: log}
}

func (s *infoServer) GetInfo(context.Context, *pluginv1.GetInfoRequest) (*pluginv1.GetInfoResponse, error) {
	vs := make([]int32, 0, len(s.cfg.APIVersions))
	for v := range s.cfg.APIVersions {
		vs = append(vs, int32(v))
	}
	slices.Sort(vs)
	return &pluginv1.GetInfoResponse{
		Kind:        s.cfg.Kind,
		Name:        s.cfg.Name,
		Version:     s.cfg.Version,
		ApiVersions: vs,
		ApiVersion:  s.negotiated.Load(),
		Pid:         int64(os.Getpid()),
	}, nil
}

func (s *infoServer) GetSchema(context.Context, *pluginv1.GetSchemaRequest) (*pluginv1.GetSchemaResponse, error) {
	ps, err := schemaToProto(s.cfg.Schema)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pluginv1.GetSchemaResponse{Schema: ps}, nil
}

func (s *infoServer) Configure(ctx context.Context, req *pluginv1.ConfigureRequest) (*pluginv1.ConfigureResponse, error) {
	raw := map[string]any{}
	if len(req.GetConfigJson()) > 0 {
		dec := json.NewDecoder(bytes.NewReader(req.GetConfigJson()))
		dec.UseNumber()
		if err := dec.Decode(&raw); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "decoding config: %v", err)
		}
	}
	cfg, err := NormalizeConfig(s.cfg.Schema, raw)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if s.cfg.Configure != nil {
		if err := s.cfg.Configure(ctx, cfg); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	s.log.Debug("configured")
	return &pluginv1.ConfigureResponse{}, nil
}

func (s *infoServer) Health(ctx context.Context, _ *pluginv1.HealthRequest) (*pluginv1.HealthResponse, error) {
	if s.cfg.Health == nil {
		return &pluginv1.HealthResponse{Healthy: true}, nil
	}
	if err := s.cfg.Health(ctx); err != nil {
		return &pluginv1.HealthResponse{Healthy: false, Message: err.Error()}, nil
	}
	return &pluginv1.HealthResponse{Healthy: true}, nil
}

// Info identifies a running plugin.
type Info struct {
	// Kind, Name and Version are what the plugin reports about itself.
	Kind, Name, Version string
	// APIVersions are every version of the kind's protocol the plugin
	// speaks, ascending.
	APIVersions []int
	// APIVersion is the version negotiated with this host.
	APIVersion int
	// Pid is the plugin's process id.
	Pid int
}

// ErrUnhealthy is wrapped by the error InfoClient.Health returns when the
// plugin answers but reports itself unhealthy.
var ErrUnhealthy = errors.New("plugin reports unhealthy")

// ErrConfigRejected is wrapped by the error InfoClient.Configure returns
// when the plugin rejects its config.
var ErrConfigRejected = errors.New("plugin rejected its config")

// InfoClient is the host side of the PluginInfo service every plugin serves.
type InfoClient struct {
	c pluginv1.PluginInfoClient
}

// NewInfoClient returns a client of the PluginInfo service on conn.
func NewInfoClient(conn grpc.ClientConnInterface) *InfoClient {
	return &InfoClient{c: pluginv1.NewPluginInfoClient(conn)}
}

// Info asks the plugin who it is.
func (c *InfoClient) Info(ctx context.Context) (Info, error) {
	r, err := c.c.GetInfo(ctx, &pluginv1.GetInfoRequest{})
	if err != nil {
		return Info{}, fmt.Errorf("plugin info: %w", err)
	}
	info := Info{Kind: r.GetKind(), Name: r.GetName(), Version: r.GetVersion(),
		APIVersion: int(r.GetApiVersion()), Pid: int(r.GetPid())}
	for _, v := range r.GetApiVersions() {
		info.APIVersions = append(info.APIVersions, int(v))
	}
	return info, nil
}

// Schema asks the plugin for the schema of its config block.
func (c *InfoClient) Schema(ctx context.Context) (Schema, error) {
	r, err := c.c.GetSchema(ctx, &pluginv1.GetSchemaRequest{})
	if err != nil {
		return Schema{}, fmt.Errorf("plugin schema: %w", err)
	}
	s, err := schemaFromProto(r.GetSchema())
	if err != nil {
		return Schema{}, fmt.Errorf("plugin schema: %w", err)
	}
	return s, nil
}

// Configure hands the plugin its decoded config (see
// ServeConfig.Configure for the value types). A config the plugin rejects
// gives an error wrapping ErrConfigRejected with the plugin's message.
func (c *InfoClient) Configure(ctx context.Context, cfg map[string]any) error {
	if cfg == nil {
		cfg = map[string]any{}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encoding plugin config: %w", err)
	}
	_, err = c.c.Configure(ctx, &pluginv1.ConfigureRequest{ConfigJson: b})
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument {
			return fmt.Errorf("%w: %s", ErrConfigRejected, st.Message())
		}
		return fmt.Errorf("plugin configure: %w", err)
	}
	return nil
}

// Health checks the plugin. An unhealthy plugin gives an error wrapping
// ErrUnhealthy with its message; a plugin that does not answer gives the
// gRPC error.
func (c *InfoClient) Health(ctx context.Context) error {
	r, err := c.c.Health(ctx, &pluginv1.HealthRequest{})
	if err != nil {
		return fmt.Errorf("plugin health check: %w", err)
	}
	if !r.GetHealthy() {
		return fmt.Errorf("%w: %s", ErrUnhealthy, r.GetMessage())
	}
	return nil
}

func schemaToProto(s Schema) (*pluginv1.Schema, error) {
	out := &pluginv1.Schema{}
	if len(s.Attributes) > 0 {
		out.Attributes = make(map[string]*pluginv1.Attribute, len(s.Attributes))
	}
	for name, a := range s.Attributes {
		pa := &pluginv1.Attribute{
			Type:        string(a.Type),
			Required:    a.Required,
			Optional:    a.Optional,
			Sensitive:   a.Sensitive,
			Description: a.Description,
		}
		if a.Default != nil {
			b, err := json.Marshal(a.Default)
			if err != nil {
				return nil, fmt.Errorf("default of attribute %q: %w", name, err)
			}
			pa.DefaultJson = b
		}
		out.Attributes[name] = pa
	}
	if len(s.Blocks) > 0 {
		out.Blocks = make(map[string]*pluginv1.BlockSchema, len(s.Blocks))
	}
	for name, b := range s.Blocks {
		ps, err := schemaToProto(b.Schema)
		if err != nil {
			return nil, err
		}
		out.Blocks[name] = &pluginv1.BlockSchema{Schema: ps, Repeated: b.Repeated}
	}
	return out, nil
}

func schemaFromProto(p *pluginv1.Schema) (Schema, error) {
	var s Schema
	if len(p.GetAttributes()) > 0 {
		s.Attributes = make(map[string]Attribute, len(p.GetAttributes()))
	}
	for name, pa := range p.GetAttributes() {
		a := Attribute{
			Type:        AttrType(pa.GetType()),
			Required:    pa.GetRequired(),
			Optional:    pa.GetOptional(),
			Sensitive:   pa.GetSensitive(),
			Description: pa.GetDescription(),
		}
		if len(pa.GetDefaultJson()) > 0 {
			dec := json.NewDecoder(bytes.NewReader(pa.GetDefaultJson()))
			dec.UseNumber()
			var v any
			if err := dec.Decode(&v); err != nil {
				return Schema{}, fmt.Errorf("default of attribute %q: %w", name, err)
			}
			nv, err := normalizeValue(a.Type, v)
			if err != nil {
				return Schema{}, fmt.Errorf("default of attribute %q: %w", name, err)
			}
			a.Default = nv
		}
		s.Attributes[name] = a
	}
	if len(p.GetBlocks()) > 0 {
		s.Blocks = make(map[string]BlockSchema, len(p.GetBlocks()))
	}
	for name, pb := range p.GetBlocks() {
		bs, err := schemaFromProto(pb.GetSchema())
		if err != nil {
			return Schema{}, fmt.Errorf("block %q: %w", name, err)
		}
		s.Blocks[name] = BlockSchema{Schema: bs, Repeated: pb.GetRepeated()}
	}
	if err := s.Validate(); err != nil {
		return Schema{}, err
	}
	return s, nil
}
