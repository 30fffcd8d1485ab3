// Package pluginecho is a minimal go-plugin gRPC plugin used by the
// microbenchmark to measure a bare plugin round trip, and a tiny
// hand-written gRPC echo service (no code generation) that the benchmark
// also serves directly over a unix socket to measure a bare gRPC round
// trip, in its own process and in another one (StartServer).
//
// Neither needs a separate binary: a program that calls MaybeServe first
// thing in main serves the plugin when it is started by Start, and the
// bare service when it is started by StartServer (both re-execute the
// given executable with a variable set), and returns at once otherwise.
package pluginecho

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Handshake is the go-plugin handshake of the echo plugin. Its magic cookie
// is the environment variable GORAY_BENCH_PLUGIN; Start sets it in the
// child's environment.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "GORAY_BENCH_PLUGIN",
	MagicCookieValue: "goray-bench-echo-v1",
}

// PluginName is the name the echo plugin is dispensed under.
const PluginName = "echo"

const (
	serviceName = "goray.bench.Echo"
	echoMethod  = "/" + serviceName + "/Echo"
	streamName  = "EchoStream"
	streamPath  = "/" + serviceName + "/" + streamName
)

// ErrNotEcho is returned when the dispensed plugin is not an echo client.
var ErrNotEcho = errors.New("pluginecho: the dispensed plugin is not an echo client")

// Echoer is the echo service: it returns its input.
type Echoer interface {
	Echo(ctx context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error)
}

type echoServer struct{}

func (echoServer) Echo(_ context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	return in, nil
}

func echoHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(wrapperspb.BytesValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(Echoer).Echo(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: echoMethod}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return srv.(Echoer).Echo(ctx, req.(*wrapperspb.BytesValue))
	})
}

// echoStreamHandler sends back every message of a bidirectional stream.
func echoStreamHandler(_ any, st grpc.ServerStream) error {
	for {
		m := new(wrapperspb.BytesValue)
		if err := st.RecvMsg(m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := st.SendMsg(m); err != nil {
			return err
		}
	}
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*Echoer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Echo", Handler: echoHandler}},
	Streams: []grpc.StreamDesc{{
		StreamName: streamName, Handler: echoStreamHandler,
		ServerStreams: true, ClientStreams: true,
	}},
	Metadata: "pluginecho",
}

// Register registers the echo service on s.
func Register(s *grpc.Server) { s.RegisterService(&serviceDesc, echoServer{}) }

// Client calls the echo service on a connection.
type Client struct{ cc grpc.ClientConnInterface }

// NewClient returns an echo client on cc.
func NewClient(cc grpc.ClientConnInterface) *Client { return &Client{cc: cc} }

// Echo sends b and returns what the service sent back.
func (c *Client) Echo(ctx context.Context, b []byte) ([]byte, error) {
	out := new(wrapperspb.BytesValue)
	if err := c.cc.Invoke(ctx, echoMethod, wrapperspb.Bytes(b), out); err != nil {
		return nil, err
	}
	return out.Value, nil
}

// Stream is an open echo stream: each RoundTrip is one message each way,
// as a task push and its reply between two core workers.
type Stream struct {
	st     grpc.ClientStream
	cancel context.CancelFunc
}

// OpenStream opens an echo stream; ctx bounds its life. Close it when done.
func (c *Client) OpenStream(ctx context.Context) (*Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	st, err := c.cc.NewStream(ctx, &serviceDesc.Streams[0], streamPath)
	if err != nil {
		cancel()
		return nil, err
	}
	return &Stream{st: st, cancel: cancel}, nil
}

// RoundTrip sends b and returns what the service sent back. When ctx ends
// first, the stream is cancelled (it cannot be used again).
func (s *Stream) RoundTrip(ctx context.Context, b []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		s.cancel()
		return nil, err
	}
	stop := context.AfterFunc(ctx, s.cancel)
	defer stop()
	if err := s.st.SendMsg(wrapperspb.Bytes(b)); err != nil {
		return nil, err
	}
	out := new(wrapperspb.BytesValue)
	if err := s.st.RecvMsg(out); err != nil {
		return nil, err
	}
	return out.Value, nil
}

// Close ends the stream.
func (s *Stream) Close() {
	_ = s.st.CloseSend()
	s.cancel()
}

// echoPlugin is the go-plugin definition (gRPC only).
type echoPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

func (echoPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	Register(s)
	return nil
}

func (echoPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return NewClient(cc), nil
}

func pluginSet() plugin.PluginSet { return plugin.PluginSet{PluginName: echoPlugin{}} }

// IsPlugin reports whether this process was started as the echo plugin.
func IsPlugin() bool { return os.Getenv(Handshake.MagicCookieKey) == Handshake.MagicCookieValue }

// MaybeServe serves the echo plugin and exits the process when this process
// was started by Start, or the bare echo service when it was started by
// StartServer; otherwise it returns at once. Call it first thing in main
// (or TestMain).
func MaybeServe() {
	maybeServeBare()
	if !IsPlugin() {
		return
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         pluginSet(),
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          hclog.NewNullLogger(),
	})
	os.Exit(0)
}

// Plugin is a running echo plugin process.
type Plugin struct {
	*Client
	pc *plugin.Client
}

// Start launches exe (a binary whose main calls MaybeServe) as the echo
// plugin over go-plugin's gRPC protocol and connects to it. ctx bounds the
// start-up. A nil logger means hclog.NewNullLogger().
func Start(ctx context.Context, exe string, logger hclog.Logger) (*Plugin, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	timeout := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pluginecho: starting %s: %w", exe, err)
	}
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          pluginSet(),
		Cmd:              exec.Command(exe),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           logger,
		StartTimeout:     timeout,
	})
	type result struct {
		raw any
		err error
	}
	done := make(chan result, 1)
	go func() {
		rpc, err := pc.Client()
		if err != nil {
			done <- result{err: err}
			return
		}
		raw, err := rpc.Dispense(PluginName)
		done <- result{raw: raw, err: err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		pc.Kill()
		<-done
		return nil, fmt.Errorf("pluginecho: starting %s: %w", exe, ctx.Err())
	}
	if r.err != nil {
		pc.Kill()
		return nil, fmt.Errorf("pluginecho: starting %s: %w", exe, r.err)
	}
	c, ok := r.raw.(*Client)
	if !ok {
		pc.Kill()
		return nil, ErrNotEcho
	}
	return &Plugin{Client: c, pc: pc}, nil
}

// Close stops the plugin process.
func (p *Plugin) Close() { p.pc.Kill() }

// Exited reports whether the plugin process has exited.
func (p *Plugin) Exited() bool { return p.pc.Exited() }
