package onesided

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

var benchSizes = []int64{64 << 20, 256 << 20}

func sizeName(n int64) string { return fmt.Sprintf("%dMiB", n>>20) }

// benchTensor allocates a uint8 tensor of n bytes with its pages touched.
func benchTensor(b *testing.B, n int64, v byte) transport.Tensor {
	b.Helper()
	tn, err := transport.NewTensorIn(testPrefix, transport.Uint8, n)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tn.Free() })
	seg, err := shmem.Open(tn.Buffer.Segment)
	if err != nil {
		b.Fatal(err)
	}
	for i := range seg.Bytes() {
		seg.Bytes()[i] = v
	}
	_ = seg.Close()
	return tn
}

// mapped maps a tensor for the duration of the benchmark.
func mapped(b *testing.B, tn transport.Tensor) []byte {
	b.Helper()
	seg, err := shmem.Open(tn.Buffer.Segment)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = seg.Close() })
	return seg.Bytes()
}

// benchReceive receives an object of n bytes into a (pre-faulted) target
// through dst, from src.
func benchReceive(b *testing.B, src, dst *Transport, n int64) {
	in := benchTensor(b, n, 7)
	target := benchTensor(b, n, 0)
	id := oid()
	m := extract(b, src, id, false, in)
	req := &transport.ReceiveRequest{ObjectID: id, Tensors: m.Tensors, TransportData: m.TransportData, Targets: []transport.Tensor{target}}
	ctx := context.Background()
	if _, err := dst.Receive(ctx, req); err != nil { // warm: metadata, connections
		b.Fatal(err)
	}
	b.SetBytes(n)
	b.ResetTimer()
	for b.Loop() {
		if _, err := dst.Receive(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadSHM: a one-sided read into a target within a node — between
// two agents (copy_file_range from the source segment into the target) and
// within one agent, the runtime's case (pwrite from the registration's
// mapping into the target) — against a plain memcpy of the same size
// between two mapped segments, and a zero-copy receive (no target).
func BenchmarkReadSHM(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n)+"/memcpy", func(b *testing.B) {
			src, dst := mapped(b, benchTensor(b, n, 7)), mapped(b, benchTensor(b, n, 0))
			copy(dst, src) // fault the pages in: the baseline is the copy alone
			b.SetBytes(n)
			for b.Loop() {
				copy(dst, src)
			}
		})
		b.Run(sizeName(n)+"/onesided-shm-two-agents", func(b *testing.B) {
			kv := plugin.NewMemoryKV()
			benchReceive(b, newTransport(b, kv, testConfig(true)), newTransport(b, kv, testConfig(true)), n)
		})
		b.Run(sizeName(n)+"/onesided-shm-one-agent", func(b *testing.B) {
			tr := newTransport(b, plugin.NewMemoryKV(), testConfig(true))
			benchReceive(b, tr, tr, n)
		})
	}
	b.Run("zero-copy-receive", func(b *testing.B) {
		kv := plugin.NewMemoryKV()
		src, dst := newTransport(b, kv, testConfig(true)), newTransport(b, kv, testConfig(true))
		in := benchTensor(b, 64<<20, 7)
		id := oid()
		m := extract(b, src, id, false, in)
		req := &transport.ReceiveRequest{ObjectID: id, Tensors: m.Tensors, TransportData: m.TransportData}
		for b.Loop() {
			if _, err := dst.Receive(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// rawTCP moves n bytes over streams loopback TCP connections (each a 1/s
// share, written from one buffer and read into another), the baseline of
// BenchmarkReadTCP.
func rawTCP(b *testing.B, n int64, streams int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	src, dst := make([]byte, n), make([]byte, n)
	for i := range src {
		src[i], dst[i] = 7, 1
	}
	share := n / int64(streams)
	var servers sync.WaitGroup
	servers.Add(1)
	conns := make(chan net.Conn, streams)
	go func() {
		defer servers.Done()
		for range streams {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	clients := make([]net.Conn, streams)
	for i := range clients {
		if clients[i], err = net.Dial("tcp", ln.Addr().String()); err != nil {
			b.Fatal(err)
		}
		defer clients[i].Close()
	}
	servers.Wait()
	close(conns)
	var srv []net.Conn
	for c := range conns {
		srv = append(srv, c)
		defer c.Close()
	}
	b.SetBytes(n)
	b.ResetTimer()
	for b.Loop() {
		var wg sync.WaitGroup
		for i := range streams {
			part := src[int64(i)*share : int64(i+1)*share]
			into := dst[int64(i)*share : int64(i+1)*share]
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, _ = srv[i].Write(part)
			}()
			go func() {
				defer wg.Done()
				_, _ = io.ReadFull(clients[i], into)
			}()
		}
		wg.Wait()
	}
}

// BenchmarkReadTCP: a one-sided read over TCP loopback (4 MiB chunks, 4
// streams, pipelined) into a target, against raw loopback TCP moving the
// same bytes over one and over four connections.
func BenchmarkReadTCP(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n)+"/raw-tcp-1conn", func(b *testing.B) { rawTCP(b, n, 1) })
		b.Run(sizeName(n)+"/raw-tcp-4conns", func(b *testing.B) { rawTCP(b, n, 4) })
		for _, streams := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/onesided-tcp-%dstreams", sizeName(n), streams), func(b *testing.B) {
				kv := plugin.NewMemoryKV()
				cfg := testConfig(false)
				cfg.Streams = streams
				benchReceive(b, newTransport(b, kv, testConfig(false)), newTransport(b, kv, cfg), n)
			})
		}
	}
}

// BenchmarkRegister measures registering a segment (mapping it read-only
// with its pages populated), as ExtractMetadata of an object on a new
// segment does, and reusing a registration. Each op extracts and collects
// one object; reg-us/segment is the registration alone.
func BenchmarkRegister(b *testing.B) {
	for _, n := range []int64{1 << 20, 64 << 20, 256 << 20} {
		b.Run(sizeName(n)+"/new", func(b *testing.B) {
			tr := newTransport(b, plugin.NewMemoryKV(), testConfig(true))
			a := agentOf(b, tr)
			in := benchTensor(b, n, 3)
			ctx := context.Background()
			before := a.Stats()
			for b.Loop() {
				id := oid()
				if _, err := tr.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: id, Tensors: []transport.Tensor{in}}); err != nil {
					b.Fatal(err)
				}
				if _, err := tr.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: id}); err != nil {
					b.Fatal(err)
				}
			}
			s := a.Stats()
			regs := s.Registered - before.Registered
			per := (s.RegisterTotal - before.RegisterTotal) / time.Duration(max(regs, 1))
			b.ReportMetric(float64(per.Microseconds()), "reg-us/segment")
			b.ReportMetric(float64(n)/per.Seconds()/(1<<30), "reg-GiB/s")
		})
		b.Run(sizeName(n)+"/reuse", func(b *testing.B) {
			tr := newTransport(b, plugin.NewMemoryKV(), testConfig(true))
			a := agentOf(b, tr)
			in := benchTensor(b, n, 3)
			extract(b, tr, oid(), false, in) // keeps the registration
			ctx := context.Background()
			for b.Loop() {
				id := oid()
				if _, err := tr.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: id, Tensors: []transport.Tensor{in}}); err != nil {
					b.Fatal(err)
				}
				if _, err := tr.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: id}); err != nil {
					b.Fatal(err)
				}
			}
			if s := a.Stats(); s.Registered != 1 {
				b.Fatalf("%d registrations, want 1 reused", s.Registered)
			}
		})
	}
}

// BenchmarkMapTarget measures what a TCP read pays per transfer for its
// destination besides the bytes: mapping the target segment with its pages
// populated, and unmapping it.
func BenchmarkMapTarget(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			a := newAgent(b, plugin.NewMemoryKV(), testConfig(false))
			tg := benchTensor(b, n, 0)
			f, err := openSegment(tg.Buffer.Segment, 0, n)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			b.SetBytes(n)
			for b.Loop() {
				mp, err := a.mapFile(f, 0, n, true)
				if err != nil {
					b.Fatal(err)
				}
				a.unmap(mp)
			}
		})
	}
}
