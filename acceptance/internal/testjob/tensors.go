package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// Producer makes tensors whose results travel by the shm transport.
type Producer struct{ last string }

// NewProducer is the Producer constructor.
func NewProducer(ctx context.Context) (*Producer, error) { return &Producer{}, nil }

// Make returns a float32 tensor [0, 1, ..., n-1] in shared memory.
func (p *Producer) Make(ctx context.Context, n int) ([]transport.Tensor, error) {
	t, err := filledTensor(ctx, n)
	if err != nil {
		return nil, err
	}
	p.last = t.Buffer.Segment
	return []transport.Tensor{t}, nil
}

// Last returns the segment of the last tensor made.
func (p *Producer) Last(ctx context.Context) (string, error) { return p.last, nil }

// Consumer receives tensors as arguments.
type Consumer struct{}

// NewConsumer is the Consumer constructor.
func NewConsumer(ctx context.Context) (*Consumer, error) { return &Consumer{}, nil }

// Sum adds up float32 tensors and says which segment the first came in.
func (c *Consumer) Sum(ctx context.Context, ts []transport.Tensor) (SumResult, error) {
	s, err := sumTensors(ctx, ts)
	if err != nil {
		return SumResult{}, err
	}
	return SumResult{Sum: s, Segment: ts[0].Buffer.Segment}, nil
}

// SumResult is what Sum returns.
type SumResult struct {
	Sum     float64
	Segment string
}

var (
	ProducerActor = ray.Actor0(NewProducer)
	ConsumerActor = ray.Actor0(NewConsumer)
	Make          = ray.Method1((*Producer).Make).TensorTransport("shm")
	LastSegment   = ray.Method0((*Producer).Last)
	Sum           = ray.Method1((*Consumer).Sum)
)

func filledTensor(ctx context.Context, n int) (transport.Tensor, error) {
	t, err := transport.NewTensor(transport.Float32, int64(n))
	if err != nil {
		return t, err
	}
	b, err := t.Bytes(ctx)
	if err != nil {
		return t, err
	}
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(i)))
	}
	return t, nil
}

func sumTensors(ctx context.Context, ts []transport.Tensor) (float64, error) {
	if len(ts) == 0 {
		return 0, errors.New("no tensors")
	}
	s := 0.0
	for _, t := range ts {
		b, err := t.Bytes(ctx)
		if err != nil {
			return 0, err
		}
		for i := 0; i+4 <= len(b); i += 4 {
			s += float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
		}
	}
	return s, nil
}

// actorToActor has p make a tensor of n float32 values whose result
// travels by mk's transport, c sum it and the driver read it too. It
// checks the sums and that c read p's segment (no copy), and returns the
// reference and that segment.
func actorToActor(ctx context.Context, mk *ray.MethodFunc1[Producer, []transport.Tensor, int], p ray.ActorHandle[Producer], c ray.ActorHandle[Consumer], n int) (ray.Ref[[]transport.Tensor], string, error) {
	want := float64(n) * float64(n-1) / 2
	ref := mk.On(p).Remote(ctx, ray.V(n))
	got, err := Sum.On(c).Remote(ctx, ref).Get(ctx)
	if err != nil {
		return ref, "", fmt.Errorf("actor-to-actor transfer: %w", err)
	}
	src, err := LastSegment.On(p).Remote(ctx).Get(ctx)
	if err != nil {
		return ref, "", err
	}
	if got.Sum != want {
		return ref, "", fmt.Errorf("consumer summed %v, want %v", got.Sum, want)
	}
	if got.Segment != src {
		return ref, "", fmt.Errorf("the consumer's tensor is in segment %q, the producer's in %q: it was copied", got.Segment, src)
	}
	ts, err := ref.Get(ctx)
	if err != nil {
		return ref, "", fmt.Errorf("driver get: %w", err)
	}
	s, err := sumTensors(ctx, ts)
	for _, t := range ts {
		t.Release() // the mappings sumTensors took
	}
	if err != nil || s != want {
		return ref, "", fmt.Errorf("driver sum %v, %v; want %v", s, err, want)
	}
	return ref, src, nil
}

// runTensors moves tensors between actors and the driver through the shm
// transport and checks bytes, zero copy, garbage collection and the error
// for a missing transport.
func runTensors(ctx context.Context) error {
	const n = 1 << 16
	want := float64(n) * float64(n-1) / 2
	p := ProducerActor.Options(ray.Transports("shm")).Remote(ctx)
	c := ConsumerActor.Options(ray.Transports("shm")).Remote(ctx)

	ref, src, err := actorToActor(ctx, Make, p, c, n)
	if err != nil {
		return err
	}
	fmt.Println("actor-to-actor: ok, zero copy through segment", src)
	fmt.Println("driver get: ok")

	// The driver puts tensors with the transport (Ray cannot).
	mine, err := filledTensor(ctx, n)
	if err != nil {
		return err
	}
	mineSeg := mine.Buffer.Segment
	put, err := ray.PutTensors(ctx, "shm", []transport.Tensor{mine})
	if err != nil {
		return fmt.Errorf("put tensors: %w", err)
	}
	got, err := Sum.On(c).Remote(ctx, put).Get(ctx)
	if err != nil || got.Sum != want || got.Segment != mineSeg {
		return fmt.Errorf("driver put -> actor: %+v, %v", got, err)
	}
	fmt.Println("driver put: ok")

	// The last reference gone: the transport frees the segments.
	ref.Release()
	put.Release()
	deadline := time.Now().Add(20 * time.Second)
	for shmem.Exists(src) || shmem.Exists(mineSeg) {
		if time.Now().After(deadline) {
			return fmt.Errorf("segments %s / %s still exist after their references were released", src, mineSeg)
		}
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Println("garbage collection: ok")

	// An actor needing a transport the node lacks cannot be created.
	bad := ConsumerActor.Options(ray.Transports("nccl")).Remote(ctx)
	err = bad.Ready(ctx)
	if !errors.Is(err, ray.ErrActorDied) || !strings.Contains(err.Error(), `transport "nccl" is not registered on node`) {
		return fmt.Errorf("actor with a missing transport: %v", err)
	}
	fmt.Println("missing transport:", err)
	return nil
}

// runTensorsRestart stores tensors by the shm transport, waits until the
// test has killed the plugin, then reads them: a read during the restart
// must fail with a typed transfer error (never hang), and reads work again
// once the host has restarted the plugin.
func runTensorsRestart(ctx context.Context, dir string) error {
	const n = 4096
	want := float64(n) * float64(n-1) / 2
	mine, err := filledTensor(ctx, n)
	if err != nil {
		return err
	}
	put, err := ray.PutTensors(ctx, "shm", []transport.Tensor{mine})
	if err != nil {
		return err
	}
	if err := signalAndWait(dir, "ready", "killed"); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	failures := 0
	for {
		ts, err := put.Get(ctx)
		if err == nil {
			if s, err := sumTensors(ctx, ts); err != nil || s != want {
				return fmt.Errorf("sum after the restart: %v, %v", s, err)
			}
			break
		}
		if !errors.Is(err, ray.ErrTransferFailed) {
			return fmt.Errorf("a read while the plugin restarts failed with an untyped error: %w", err)
		}
		failures++
		if time.Now().After(deadline) {
			return fmt.Errorf("reads still fail: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Println("typed failures during the restart:", failures)
	fresh, err := filledTensor(ctx, n)
	if err != nil {
		return err
	}
	again, err := ray.PutTensors(ctx, "shm", []transport.Tensor{fresh})
	if err != nil {
		return fmt.Errorf("put after the restart: %w", err)
	}
	ts, err := again.Get(ctx)
	if err != nil {
		return fmt.Errorf("get after the restart: %w", err)
	}
	if s, _ := sumTensors(ctx, ts); s != want {
		return fmt.Errorf("sum after the restart %v, want %v", s, want)
	}
	for _, t := range ts {
		t.Release()
	}
	put.Release()
	again.Release()
	fmt.Println("after restart: ok")
	return nil
}

// runTensorsTimeout reads tensors while the test has frozen the transport
// plugin: the read must fail within the transfer timeout with a typed error
// (ErrTransferFailed, transport.ErrTimeout), and transfers work again once
// the plugin runs.
func runTensorsTimeout(ctx context.Context, dir string) error {
	const n = 4096
	mine, err := filledTensor(ctx, n)
	if err != nil {
		return err
	}
	put, err := ray.PutTensors(ctx, "shm", []transport.Tensor{mine})
	if err != nil {
		return err
	}
	if err := signalAndWait(dir, "ready", "frozen"); err != nil {
		return err
	}
	start := time.Now()
	_, err = put.Get(ctx)
	if !errors.Is(err, ray.ErrTransferFailed) || !errors.Is(err, transport.ErrTimeout) {
		return fmt.Errorf("a read from a frozen transport: want ErrTransferFailed and transport.ErrTimeout, got %v", err)
	}
	fmt.Printf("timed out after %v: %v\n", time.Since(start).Round(10*time.Millisecond), err)
	if err := signalAndWait(dir, "timedout", "thawed"); err != nil {
		return err
	}
	fresh, err := filledTensor(ctx, n)
	if err != nil {
		return err
	}
	again, err := ray.PutTensors(ctx, "shm", []transport.Tensor{fresh})
	if err != nil {
		return fmt.Errorf("put after the timeout: %w", err)
	}
	ts, err := again.Get(ctx)
	if err != nil {
		return fmt.Errorf("get after the timeout: %w", err)
	}
	if s, _ := sumTensors(ctx, ts); s != float64(n)*float64(n-1)/2 {
		return fmt.Errorf("sum after the timeout: %v", s)
	}
	for _, t := range ts {
		t.Release()
	}
	put.Release()
	again.Release()
	fmt.Println("after the timeout: ok")
	return nil
}

// signalAndWait creates dir/mine and waits (up to 20 s) for dir/theirs.
func signalAndWait(dir, mine, theirs string) error {
	if err := os.WriteFile(filepath.Join(dir, mine), nil, 0o644); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, theirs)); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the test never created %s", theirs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runTensorsDirect moves tensors between two actors by the shm transport
// until the test has seen their workers connect to the plugin themselves
// (file "checked"), then, after the test has killed the plugin ("killed"),
// until it has seen them connect to the restarted one ("stop"). A transfer
// may fail only with a typed transfer error, and only while the plugin
// restarts.
func runTensorsDirect(ctx context.Context, dir string) error {
	const n = 1 << 12
	p := ProducerActor.Options(ray.Transports("shm")).Remote(ctx)
	c := ConsumerActor.Options(ray.Transports("shm")).Remote(ctx)
	transfers := func(until string, failOK bool) (ok, failed int, err error) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			ref, _, err := actorToActor(ctx, Make, p, c, n)
			ref.Release()
			switch {
			case err == nil:
				ok++
			case failOK && errors.Is(err, ray.ErrTransferFailed):
				failed++
			default:
				return ok, failed, err
			}
			if _, err := os.Stat(filepath.Join(dir, until)); err == nil && ok > 0 {
				return ok, failed, nil
			}
			if time.Now().After(deadline) {
				return ok, failed, fmt.Errorf("the test never created %s (%d transfers, %d failed)", until, ok, failed)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644); err != nil {
		return err
	}
	if _, _, err := transfers("checked", false); err != nil {
		return err
	}
	if err := signalAndWait(dir, "waiting", "killed"); err != nil {
		return err
	}
	ok, failed, err := transfers("stop", true)
	if err != nil {
		return err
	}
	fmt.Printf("direct after restart: ok (%d transfers, %d failed while the plugin restarted)\n", ok, failed)
	return nil
}
