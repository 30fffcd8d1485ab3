package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/goray-dev/goray/cmd/goray/internal/bench/pluginecho"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Limit names.
const (
	LimitMemcpy = "memcpy_bandwidth"
	LimitTCP    = "tcp_loopback_bandwidth"
	LimitUnix   = "unix_socket_bandwidth"
	LimitGRPC   = "grpc_unary_round_trip"
	// LimitGRPCStream is one message each way on an open gRPC stream to
	// a server in another process: what a synchronous task or actor call
	// is made of between two core workers, which are always two
	// processes, without goray's own work.
	LimitGRPCStream = "grpc_stream_round_trip_other_process"
	LimitPlugin     = "go_plugin_round_trip"
)

// streamWriteSize is the write (and read) size of the socket limits.
const streamWriteSize = 1 << 20

// env is what the workloads are built for.
type env struct {
	quick  bool
	half   int // N_CPU/2 = max(1, NumCPU/2)
	logger hclog.Logger
	// shmUnavailable, when set, says why the node has no shm transport.
	shmUnavailable string
	// gcsAddress is the cluster's GCS, where a second node can join.
	gcsAddress string
	// minio is the MinIO server of the spilling workloads.
	minio s3Server
}

// limits returns the machine limits, measured before the metrics.
func (e *env) limits() []workload {
	memcpySize, streamChunk := 256<<20, 64<<20
	if e.quick {
		memcpySize, streamChunk = 64<<20, 16<<20
	}
	return append([]workload{
		{
			name: LimitMemcpy, unit: UnitGBps, mult: float64(memcpySize) / 1e9,
			note:  fmt.Sprintf("copy() between two warm %s buffers, one goroutine (GB = 10^9 bytes)", humanize.IBytes(uint64(memcpySize))),
			setup: memcpySetup(memcpySize),
		},
		{
			name: LimitTCP, unit: UnitGBps, mult: float64(streamChunk) / 1e9,
			note:  fmt.Sprintf("one TCP stream over 127.0.0.1, 1 MiB writes, %s per call then a 1-byte ack", humanize.IBytes(uint64(streamChunk))),
			setup: streamSetup("tcp", streamChunk),
		},
		{
			name: LimitUnix, unit: UnitGBps, mult: float64(streamChunk) / 1e9,
			note:  fmt.Sprintf("one unix stream socket, 1 MiB writes, %s per call then a 1-byte ack", humanize.IBytes(uint64(streamChunk))),
			setup: streamSetup("unix", streamChunk),
		},
		{
			name: LimitGRPC, unit: UnitMicros, latency: true,
			note:  "bare grpc-go unary call (hand-written echo service, 2-byte payload, default options) over a unix socket",
			setup: grpcSetup,
		},
		{
			name: LimitGRPCStream, unit: UnitMicros, latency: true,
			note:  "one 2-byte message each way on an open bidirectional stream to this binary re-executed as a bare gRPC server (default options, no go-plugin) over a unix socket: it crosses processes, as a call from a driver to a worker does",
			setup: e.grpcStreamSetup,
		},
		{
			name: LimitPlugin, unit: UnitMicros, latency: true,
			note:  "unary echo call to a go-plugin gRPC plugin (this binary re-executed as the plugin)",
			setup: e.pluginSetup,
		},
	}, e.s3Limits()...)
}

// fill writes a non-zero pattern into every page of b, so copies read real
// memory rather than the kernel's shared zero page.
func fill(b []byte) {
	if len(b) == 0 {
		return
	}
	for i := 0; i < len(b) && i < 4096; i++ {
		b[i] = byte(i*7 + 1)
	}
	for n := min(len(b), 4096); n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

func memcpySetup(size int) func(context.Context) (func(context.Context) error, func(context.Context), error) {
	return func(context.Context) (func(context.Context) error, func(context.Context), error) {
		src, dst := make([]byte, size), make([]byte, size)
		fill(src)
		fill(dst)
		fn := func(context.Context) error {
			copy(dst, src)
			return nil
		}
		return fn, noTeardown, nil
	}
}

// streamSetup measures one stream socket: the client writes chunk bytes per
// call and waits for the reader's 1-byte acknowledgement.
func streamSetup(network string, chunk int) func(context.Context) (func(context.Context) error, func(context.Context), error) {
	return func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
		addr, dir := "127.0.0.1:0", ""
		if network == "unix" {
			var err error
			if dir, err = os.MkdirTemp("", "gb"); err != nil {
				return nil, nil, err
			}
			addr = filepath.Join(dir, "s")
		}
		cleanDir := func() {
			if dir != "" {
				os.RemoveAll(dir)
			}
		}
		ln, err := net.Listen(network, addr)
		if err != nil {
			cleanDir()
			return nil, nil, err
		}
		sinkDone := make(chan error, 1)
		go func() { sinkDone <- sink(ln, chunk) }()
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, ln.Addr().String())
		if err != nil {
			ln.Close()
			<-sinkDone
			cleanDir()
			return nil, nil, err
		}
		buf := make([]byte, streamWriteSize)
		fill(buf)
		ack := make([]byte, 1)
		fn := func(ctx context.Context) error {
			if dl, ok := ctx.Deadline(); ok {
				conn.SetDeadline(dl)
			}
			for sent := 0; sent < chunk; {
				n, err := conn.Write(buf[:min(len(buf), chunk-sent)])
				sent += n
				if err != nil {
					return fmt.Errorf("%s write: %w", network, err)
				}
			}
			if _, err := io.ReadFull(conn, ack); err != nil {
				return fmt.Errorf("%s ack: %w", network, err)
			}
			return nil
		}
		teardown := func(context.Context) {
			conn.Close()
			ln.Close()
			<-sinkDone
			cleanDir()
		}
		return fn, teardown, nil
	}
}

// sink accepts one connection, reads everything and acknowledges every
// chunk bytes with one byte.
func sink(ln net.Listener, chunk int) error {
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, streamWriteSize)
	got := 0
	for {
		n, err := c.Read(buf)
		got += n
		for got >= chunk {
			got -= chunk
			if _, err := c.Write([]byte{1}); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

var okPayload = []byte("ok")

func grpcSetup(context.Context) (func(context.Context) error, func(context.Context), error) {
	dir, err := os.MkdirTemp("", "gb")
	if err != nil {
		return nil, nil, err
	}
	sock := filepath.Join(dir, "g")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	srv := grpc.NewServer()
	pluginecho.Register(srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	stop := func() {
		srv.Stop()
		<-served
		os.RemoveAll(dir)
	}
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		stop()
		return nil, nil, err
	}
	c := pluginecho.NewClient(cc)
	fn := func(ctx context.Context) error { return echoOnce(ctx, c) }
	teardown := func(context.Context) {
		cc.Close()
		stop()
	}
	return fn, teardown, nil
}

func echoOnce(ctx context.Context, c *pluginecho.Client) error {
	out, err := c.Echo(ctx, okPayload)
	if err != nil {
		return err
	}
	if string(out) != "ok" {
		return fmt.Errorf("echo returned %q, want \"ok\"", out)
	}
	return nil
}

func (e *env) grpcStreamSetup(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
	if !pluginHook.Load() {
		return nil, nil, &notAvailableError{reason: "this binary does not call bench.MaybeServePlugin, so it cannot serve as the echo server"}
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, &notAvailableError{reason: "cannot find this program's executable: " + err.Error()}
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := pluginecho.StartServer(sctx, exe)
	if err != nil {
		return nil, nil, err
	}
	// The stream lives as long as the limit, not the setup's context.
	st, err := s.OpenStream(context.WithoutCancel(ctx))
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	fn := func(ctx context.Context) error {
		out, err := st.RoundTrip(ctx, okPayload)
		if err == nil && string(out) != "ok" {
			err = fmt.Errorf("echo stream returned %q, want \"ok\"", out)
		}
		return err
	}
	teardown := func(context.Context) {
		st.Close()
		s.Close()
	}
	return fn, teardown, nil
}

func (e *env) pluginSetup(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
	if !pluginHook.Load() {
		return nil, nil, &notAvailableError{reason: "this binary does not call bench.MaybeServePlugin, so it cannot serve as the plugin"}
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, &notAvailableError{reason: "cannot find this program's executable: " + err.Error()}
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err := pluginecho.Start(sctx, exe, e.logger)
	if err != nil {
		return nil, nil, err
	}
	fn := func(ctx context.Context) error { return echoOnce(ctx, p.Client) }
	return fn, func(context.Context) { p.Close() }, nil
}
