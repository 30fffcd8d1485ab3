package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/goray-dev/goray/internal/proto/providerv1"
	"github.com/goray-dev/goray/sdk/plugin"
)

// APIVersion is the newest version of the provider plugin protocol this
// SDK speaks.
const APIVersion = 1

// Register registers impl as the Provider gRPC service (API version 1) on
// s. Serve does this for plugins; tests and embedders can use it with
// their own server.
func Register(s *grpc.Server, impl Provider) {
	pb.RegisterProviderServer(s, &server{impl: impl})
}

// NewClient returns a Provider backed by a provider plugin reachable over
// conn, which speaks the negotiated apiVersion. Errors keep their
// identity: errors.Is(err, ErrInvalidRequest) works on a request the
// plugin refused, a *ProviderError names the operation, cluster and
// request, and a plugin that is gone or restarting gives ErrUnavailable.
// Context cancellation and deadlines travel to the plugin. The cluster
// token of a launch never shows in the errors it returns.
//
// conn is usually the *grpc.ClientConn of a plugin; any
// grpc.ClientConnInterface works.
func NewClient(conn grpc.ClientConnInterface, apiVersion int) Provider {
	return &client{c: pb.NewProviderClient(conn), version: apiVersion}
}

// ---------------------------------------------------------------- errors

// errorTable is the provider kind's error table: what each sentinel error
// is called on the wire and which gRPC code carries it.
var errorTable = plugin.ErrorTable{
	{Name: "invalid_request", Errors: []error{ErrInvalidRequest}, Code: codes.InvalidArgument},
	{Name: "quota_exceeded", Errors: []error{ErrQuotaExceeded}, Code: codes.ResourceExhausted},
	{Name: "not_found", Errors: []error{ErrNotFound}, Code: codes.NotFound},
	{Name: "unavailable", Errors: []error{ErrUnavailable}, Code: codes.Unavailable},
	{Name: "deadline", Errors: []error{context.DeadlineExceeded}, Code: codes.DeadlineExceeded},
	{Name: "canceled", Errors: []error{context.Canceled}, Code: codes.Canceled},
}

// where is what a call is about: its operation, cluster and request.
type where struct {
	op, cluster, requestID string
}

func (w where) wrap(err error) error {
	if err == nil {
		return nil
	}
	var pe *ProviderError
	if errors.As(err, &pe) {
		return err
	}
	return &ProviderError{Op: w.op, Cluster: w.cluster, RequestID: w.requestID, Err: err}
}

// toStatus turns an implementation's error into a gRPC status error that
// carries an ErrorInfo detail, with the tokens tokens knows redacted.
func toStatus(w where, err error, tokens *tokenSet) error {
	if err == nil {
		return nil
	}
	if se, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		// Already a status (a panic turned into Internal).
		st := se.GRPCStatus()
		return status.Error(st.Code(), tokens.redact(st.Message()))
	}
	_, code := errorTable.Classify(err)
	msg := err.Error()
	var pe *ProviderError
	if errors.As(err, &pe) {
		if pe.Op != "" {
			w.op = pe.Op
		}
		if pe.Cluster != "" {
			w.cluster = pe.Cluster
		}
		if pe.RequestID != "" {
			w.requestID = pe.RequestID
		}
		if pe.Err != nil {
			msg = pe.Err.Error()
		}
	}
	msg = tokens.redact(msg)
	full := (&ProviderError{Op: w.op, Cluster: w.cluster, RequestID: w.requestID, Err: errors.New(msg)}).Error()
	return plugin.StatusError(code, full, &pb.ErrorInfo{Kinds: errorTable.Kinds(err), Op: w.op, ClusterName: w.cluster, RequestId: w.requestID, Message: msg})
}

// fromStatus turns a gRPC error from the plugin back into a *ProviderError
// whose cause matches the original sentinel errors. ctx is the caller's: a
// call cancelled while ctx is alive lost its connection (the plugin died
// and the host is restarting it), which is ErrUnavailable.
func fromStatus(ctx context.Context, w where, err error, tokens *tokenSet) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return w.wrap(errors.New(tokens.redact(err.Error())))
	}
	if info, ok := plugin.DetailOf[*pb.ErrorInfo](st); ok {
		if info.GetOp() != "" {
			w.op = info.GetOp()
		}
		if info.GetClusterName() != "" {
			w.cluster = info.GetClusterName()
		}
		if info.GetRequestId() != "" {
			w.requestID = info.GetRequestId()
		}
		re := errorTable.Remote(tokens.redact(info.GetMessage()), info.GetKinds())
		return &ProviderError{Op: w.op, Cluster: w.cluster, RequestID: w.requestID, Err: re}
	}
	st = plugin.LostConnection(ctx, st)
	msg := fmt.Sprintf("%s (%s)", tokens.redact(st.Message()), st.Code())
	k, ok := errorTable.ForCode(st.Code())
	if !ok {
		return w.wrap(&codeError{msg: msg, st: st})
	}
	// No detail: the plugin is gone or restarting (Unavailable), an older
	// plugin, a deadline hit on the way. Keep the status in the chain so
	// callers can still inspect its code.
	return w.wrap(errorTable.Remote(msg, []string{k.Name}, &codeError{msg: msg, st: st}))
}

// codeError is a status error from the plugin with its message redacted;
// status.Code still reads its code.
type codeError struct {
	msg string
	st  *status.Status
}

func (e *codeError) Error() string { return e.msg }

// GRPCStatus returns the status, for status.Code and status.FromError.
func (e *codeError) GRPCStatus() *status.Status { return status.New(e.st.Code(), e.msg) }

// tokenSet remembers the cluster tokens of the launches a client or server
// has seen, so that they can be redacted from every message that passes
// through it. It keeps the most recent maxTokens.
type tokenSet struct {
	mu     sync.Mutex
	tokens []string
}

const maxTokens = 16

func (s *tokenSet) add(token string) {
	if s == nil || len(token) < minRedactLen {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, t := range s.tokens {
		if t == token {
			// Most recent last.
			s.tokens = append(append(s.tokens[:i:i], s.tokens[i+1:]...), token)
			return
		}
	}
	s.tokens = append(s.tokens, token)
	if len(s.tokens) > maxTokens {
		s.tokens = s.tokens[len(s.tokens)-maxTokens:]
	}
}

func (s *tokenSet) redact(text string) string {
	if s == nil {
		return text
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tokens {
		text = RedactToken(text, t)
	}
	return text
}

// ---------------------------------------------------------------- conversions

func nodeSpecToProto(s NodeSpec) *pb.NodeSpec {
	return &pb.NodeSpec{
		HeadAddress:   s.HeadAddress,
		Resources:     s.Resources,
		Labels:        s.Labels,
		AuthToken:     s.AuthToken,
		SetupCommands: s.SetupCommands,
		GorayBinary:   s.GorayBinary,
	}
}

func nodeSpecFromProto(p *pb.NodeSpec) NodeSpec {
	return NodeSpec{
		HeadAddress:   p.GetHeadAddress(),
		Resources:     p.GetResources(),
		Labels:        p.GetLabels(),
		AuthToken:     p.GetAuthToken(),
		SetupCommands: p.GetSetupCommands(),
		GorayBinary:   p.GetGorayBinary(),
	}
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func instanceToProto(i Instance) *pb.Instance {
	return &pb.Instance{Id: i.ID, NodeType: i.NodeType, RequestId: i.RequestID, State: string(i.State),
		Address: i.Address, LaunchedAtUnixNano: unixNano(i.LaunchedAt)}
}

func instanceFromProto(p *pb.Instance) Instance {
	return Instance{ID: p.GetId(), NodeType: p.GetNodeType(), RequestID: p.GetRequestId(), State: InstanceState(p.GetState()),
		Address: p.GetAddress(), LaunchedAt: fromUnixNano(p.GetLaunchedAtUnixNano())}
}

func launchErrorToProto(e LaunchError, tokens *tokenSet) *pb.LaunchError {
	return &pb.LaunchError{Op: e.Op, RequestId: e.RequestID, NodeType: e.NodeType, Count: int64(e.Count),
		InstanceId: e.InstanceID, Message: tokens.redact(e.Message), AtUnixNano: unixNano(e.At)}
}

func launchErrorFromProto(p *pb.LaunchError, tokens *tokenSet) LaunchError {
	return LaunchError{Op: p.GetOp(), RequestID: p.GetRequestId(), NodeType: p.GetNodeType(), Count: int(p.GetCount()),
		InstanceID: p.GetInstanceId(), Message: tokens.redact(p.GetMessage()), At: fromUnixNano(p.GetAtUnixNano())}
}

// schemaToJSON encodes a node_config schema for the wire, its defaults in
// canonical form (durations as strings, sizes as bytes).
func schemaToJSON(s plugin.Schema) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	c, err := canonicalDefaults(s)
	if err != nil {
		return nil, err
	}
	return json.Marshal(c)
}

// canonicalDefaults returns s with each default as plugin.NormalizeConfig
// gives it.
func canonicalDefaults(s plugin.Schema) (plugin.Schema, error) {
	out := plugin.Schema{}
	if s.Attributes != nil {
		out.Attributes = make(map[string]plugin.Attribute, len(s.Attributes))
		for name, a := range s.Attributes {
			if a.Default != nil {
				norm, err := plugin.NormalizeConfig(plugin.Schema{Attributes: map[string]plugin.Attribute{name: a}}, map[string]any{})
				if err != nil {
					return plugin.Schema{}, err
				}
				a.Default = norm[name]
			}
			out.Attributes[name] = a
		}
	}
	if s.Blocks != nil {
		out.Blocks = make(map[string]plugin.BlockSchema, len(s.Blocks))
		for name, b := range s.Blocks {
			bs, err := canonicalDefaults(b.Schema)
			if err != nil {
				return plugin.Schema{}, err
			}
			out.Blocks[name] = plugin.BlockSchema{Schema: bs, Repeated: b.Repeated}
		}
	}
	return out, nil
}

// schemaFromJSON decodes a node_config schema from the wire and checks it.
func schemaFromJSON(b []byte) (plugin.Schema, error) {
	var s plugin.Schema
	if len(b) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return plugin.Schema{}, fmt.Errorf("the plugin sent a node_config schema that does not decode: %v", err)
	}
	s = sizesAsInt(s)
	if err := s.Validate(); err != nil {
		return plugin.Schema{}, fmt.Errorf("the plugin sent an invalid node_config schema: %w", err)
	}
	return s, nil
}

// sizesAsInt turns the float64 defaults JSON gives size attributes back
// into int64 bytes.
func sizesAsInt(s plugin.Schema) plugin.Schema {
	for name, a := range s.Attributes {
		if f, ok := a.Default.(float64); ok && a.Type == plugin.TypeSize && f == float64(int64(f)) {
			a.Default = int64(f)
			s.Attributes[name] = a
		}
	}
	for name, b := range s.Blocks {
		b.Schema = sizesAsInt(b.Schema)
		s.Blocks[name] = b
	}
	return s
}

// ---------------------------------------------------------------- server

// server adapts a Provider to the generated gRPC service. A panic in the
// implementation becomes an Internal error instead of killing the plugin.
// It checks every request (Validate) before the implementation sees it,
// and redacts the cluster tokens of the launches it has seen from every
// error and LaunchError it sends.
type server struct {
	pb.UnimplementedProviderServer
	impl   Provider
	tokens tokenSet
}

func (s *server) NodeConfigSchema(ctx context.Context, _ *pb.NodeConfigSchemaRequest) (_ *pb.NodeConfigSchemaResponse, err error) {
	w := where{op: OpNodeConfigSchema}
	defer plugin.Recover(&err, "provider %s", OpNodeConfigSchema)
	r, err := s.impl.NodeConfigSchema(ctx, &NodeConfigSchemaRequest{})
	if err != nil {
		return nil, toStatus(w, err, &s.tokens)
	}
	if r == nil {
		r = &NodeConfigSchemaResponse{}
	}
	b, err := schemaToJSON(r.Schema)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "provider %s: the plugin's schema: %v", OpNodeConfigSchema, err)
	}
	return &pb.NodeConfigSchemaResponse{SchemaJson: b}, nil
}

func (s *server) Launch(ctx context.Context, p *pb.LaunchRequest) (_ *pb.LaunchResponse, err error) {
	req := &LaunchRequest{
		RequestID:   p.GetRequestId(),
		ClusterName: p.GetClusterName(),
		NodeType:    p.GetNodeType(),
		Count:       int(p.GetCount()),
		NodeConfig:  p.GetNodeConfig(),
		Node:        nodeSpecFromProto(p.GetNode()),
	}
	if int64(req.Count) != p.GetCount() {
		req.Count = -1 // out of int's range: refused below
	}
	s.tokens.add(req.Node.AuthToken)
	w := where{op: OpLaunch, cluster: req.ClusterName, requestID: req.RequestID}
	defer func() { err = redactStatus(err, &s.tokens) }()
	defer plugin.Recover(&err, "provider %s (cluster %q, request %q)", OpLaunch, req.ClusterName, req.RequestID)
	if err := req.Validate(); err != nil {
		return nil, toStatus(w, err, &s.tokens)
	}
	if _, err := s.impl.Launch(ctx, req); err != nil {
		return nil, toStatus(w, err, &s.tokens)
	}
	return &pb.LaunchResponse{}, nil
}

// redactStatus redacts the known tokens from a status error's message (a
// panic's, whose stack may show the request).
func redactStatus(err error, tokens *tokenSet) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Internal {
		return err
	}
	return status.Error(st.Code(), tokens.redact(st.Message()))
}

func (s *server) Terminate(ctx context.Context, p *pb.TerminateRequest) (_ *pb.TerminateResponse, err error) {
	req := &TerminateRequest{RequestID: p.GetRequestId(), ClusterName: p.GetClusterName(), InstanceIDs: p.GetInstanceIds()}
	w := where{op: OpTerminate, cluster: req.ClusterName, requestID: req.RequestID}
	defer plugin.Recover(&err, "provider %s (cluster %q, request %q)", OpTerminate, req.ClusterName, req.RequestID)
	if err := req.Validate(); err != nil {
		return nil, toStatus(w, err, &s.tokens)
	}
	if _, err := s.impl.Terminate(ctx, req); err != nil {
		return nil, toStatus(w, err, &s.tokens)
	}
	return &pb.TerminateResponse{}, nil
}

func (s *server) List(ctx context.Context, p *pb.ListRequest) (_ *pb.ListResponse, err error) {
	req := &ListRequest{ClusterName: p.GetClusterName()}
	w := where{op: OpList, cluster: req.ClusterName}
	defer plugin.Recover(&err, "provider %s (cluster %q)", OpList, req.ClusterName)
	if err := req.Validate(); err != nil {
		return nil, toStatus(w, err, &s.tokens)
	}
	r, err := s.impl.List(ctx, req)
	if err != nil {
		return nil, toStatus(w, err, &s.tokens)
	}
	out := &pb.ListResponse{}
	if r != nil {
		out.Instances = make([]*pb.Instance, len(r.Instances))
		for i, in := range r.Instances {
			out.Instances[i] = instanceToProto(in)
		}
	}
	return out, nil
}

func (s *server) PollErrors(ctx context.Context, p *pb.PollErrorsRequest) (_ *pb.PollErrorsResponse, err error) {
	req := &PollErrorsRequest{ClusterName: p.GetClusterName()}
	w := where{op: OpPollErrors, cluster: req.ClusterName}
	defer plugin.Recover(&err, "provider %s (cluster %q)", OpPollErrors, req.ClusterName)
	if err := req.Validate(); err != nil {
		return nil, toStatus(w, err, &s.tokens)
	}
	r, err := s.impl.PollErrors(ctx, req)
	if err != nil {
		return nil, toStatus(w, err, &s.tokens)
	}
	out := &pb.PollErrorsResponse{}
	if r != nil {
		out.Errors = make([]*pb.LaunchError, len(r.Errors))
		for i, e := range r.Errors {
			out.Errors[i] = launchErrorToProto(e, &s.tokens)
		}
	}
	return out, nil
}

// ---------------------------------------------------------------- client

type client struct {
	c       pb.ProviderClient
	version int
	tokens  tokenSet
}

func (c *client) NodeConfigSchema(ctx context.Context, _ *NodeConfigSchemaRequest) (*NodeConfigSchemaResponse, error) {
	w := where{op: OpNodeConfigSchema}
	r, err := c.c.NodeConfigSchema(ctx, &pb.NodeConfigSchemaRequest{})
	if err != nil {
		return nil, fromStatus(ctx, w, err, &c.tokens)
	}
	s, err := schemaFromJSON(r.GetSchemaJson())
	if err != nil {
		return nil, w.wrap(err)
	}
	return &NodeConfigSchemaResponse{Schema: s}, nil
}

func (c *client) Launch(ctx context.Context, req *LaunchRequest) (*LaunchResponse, error) {
	if req == nil {
		req = &LaunchRequest{}
	}
	c.tokens.add(req.Node.AuthToken)
	w := where{op: OpLaunch, cluster: req.ClusterName, requestID: req.RequestID}
	_, err := c.c.Launch(ctx, &pb.LaunchRequest{
		RequestId:   req.RequestID,
		ClusterName: req.ClusterName,
		NodeType:    req.NodeType,
		Count:       int64(req.Count),
		NodeConfig:  req.NodeConfig,
		Node:        nodeSpecToProto(req.Node),
	})
	if err != nil {
		return nil, fromStatus(ctx, w, err, &c.tokens)
	}
	return &LaunchResponse{}, nil
}

func (c *client) Terminate(ctx context.Context, req *TerminateRequest) (*TerminateResponse, error) {
	if req == nil {
		req = &TerminateRequest{}
	}
	w := where{op: OpTerminate, cluster: req.ClusterName, requestID: req.RequestID}
	_, err := c.c.Terminate(ctx, &pb.TerminateRequest{RequestId: req.RequestID, ClusterName: req.ClusterName, InstanceIds: req.InstanceIDs})
	if err != nil {
		return nil, fromStatus(ctx, w, err, &c.tokens)
	}
	return &TerminateResponse{}, nil
}

func (c *client) List(ctx context.Context, req *ListRequest) (*ListResponse, error) {
	if req == nil {
		req = &ListRequest{}
	}
	w := where{op: OpList, cluster: req.ClusterName}
	r, err := c.c.List(ctx, &pb.ListRequest{ClusterName: req.ClusterName})
	if err != nil {
		return nil, fromStatus(ctx, w, err, &c.tokens)
	}
	out := &ListResponse{Instances: make([]Instance, len(r.GetInstances()))}
	for i, in := range r.GetInstances() {
		out.Instances[i] = instanceFromProto(in)
	}
	return out, nil
}

func (c *client) PollErrors(ctx context.Context, req *PollErrorsRequest) (*PollErrorsResponse, error) {
	if req == nil {
		req = &PollErrorsRequest{}
	}
	w := where{op: OpPollErrors, cluster: req.ClusterName}
	r, err := c.c.PollErrors(ctx, &pb.PollErrorsRequest{ClusterName: req.ClusterName})
	if err != nil {
		return nil, fromStatus(ctx, w, err, &c.tokens)
	}
	out := &PollErrorsResponse{Errors: make([]LaunchError, len(r.GetErrors()))}
	for i, e := range r.GetErrors() {
		out.Errors[i] = launchErrorFromProto(e, &c.tokens)
	}
	return out, nil
}
