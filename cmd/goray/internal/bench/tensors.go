package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/dustin/go-humanize"
	"github.com/goray-dev/goray/config"
	shm "github.com/goray-dev/goray/plugins/shm/shmtransport"
	"github.com/goray-dev/goray/sdk/ray"
	"github.com/goray-dev/goray/sdk/transport"
)

// MetricTensorTransferShm is the tensor transfer metric of the shm
// transport (not one of Ray's metrics).
const MetricTensorTransferShm = "tensor_transfer_shm_actor_to_actor"

// shmTransport is the transport the tensor metric measures.
const shmTransport = shm.Name

// ShmPluginBinary is the file name under which the goray binary serves the
// shm tensor transport plugin (see MaybeServeTransport): the name the node
// host looks for in its plugin_dir for `plugin "transport" "shm"`.
const ShmPluginBinary = "goray-transport-" + shmTransport

// tensorPage is the stride at which the producer writes its tensors.
const tensorPage = 4096

// transportHook records that the binary calls MaybeServeTransport, so the
// tensor metric can run the binary as the shm plugin.
var transportHook atomic.Bool

// MaybeServeTransport serves goray's shared-memory tensor transport as a
// plugin and never returns when this process was started under the name
// ShmPluginBinary (the tensor metric links the running binary under that
// name into a temporary plugin_dir, busybox style); otherwise it returns at
// once. Call it first thing in main, before MaybeServePlugin and ray.Init.
func MaybeServeTransport() {
	transportHook.Store(true)
	if filepath.Base(os.Args[0]) == ShmPluginBinary {
		transport.Serve(shm.New())
	}
}

// shmNodeConfig returns an embedded node's config that runs this binary as
// the shm transport plugin, from a fresh temporary plugin_dir holding a
// symbolic link named ShmPluginBinary to the running executable, and a
// function that removes that directory (call it once the node has stopped).
func shmNodeConfig() (*config.Node, func(), error) {
	if !transportHook.Load() {
		return nil, nil, errors.New("this binary does not call bench.MaybeServeTransport, so it cannot serve as the shm transport plugin")
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot find this program's executable: %w", err)
	}
	dir, err := os.MkdirTemp("", "goray-bench-plugins-")
	if err != nil {
		return nil, nil, fmt.Errorf("plugin dir for the shm transport: %w", err)
	}
	cleanup := func() { os.RemoveAll(dir) }
	if err := os.Symlink(exe, filepath.Join(dir, ShmPluginBinary)); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("linking %s as the shm transport plugin: %w", exe, err)
	}
	cfg := config.Default()
	cfg.PluginDir = dir
	cfg.Plugins = []config.Plugin{{Kind: "transport", Name: shmTransport}}
	return cfg, cleanup, nil
}

// tensorProducer makes tensors whose results travel by the shm transport.
type tensorProducer struct{}

func newTensorProducer(context.Context) (*tensorProducer, error) { return &tensorProducer{}, nil }

// make returns a fresh float32 tensor of size bytes (a multiple of
// tensorPage) in a new shared-memory segment. It writes one 8-byte word per
// page (the page's number, from 1): every page is then real memory, as in a
// computed tensor, without charging a full fill to the transfer.
func (*tensorProducer) make(ctx context.Context, size int) ([]transport.Tensor, error) {
	if size <= 0 || size%tensorPage != 0 {
		return nil, fmt.Errorf("tensor size %d is not a positive multiple of %d", size, tensorPage)
	}
	t, err := transport.NewTensor(transport.Float32, int64(size/4))
	if err != nil {
		return nil, err
	}
	b, err := t.Bytes(ctx)
	if err != nil {
		_ = t.Free()
		return nil, err
	}
	for off := 0; off < len(b); off += tensorPage {
		binary.LittleEndian.PutUint64(b[off:], uint64(off/tensorPage+1))
	}
	t.Release()
	return []transport.Tensor{t}, nil
}

// tensorConsumer reads tensors it receives as arguments.
type tensorConsumer struct{}

func newTensorConsumer(context.Context) (*tensorConsumer, error) { return &tensorConsumer{}, nil }

// sum reads every byte of the tensors and returns the sum of their
// little-endian 64-bit words.
func (*tensorConsumer) sum(ctx context.Context, ts []transport.Tensor) (uint64, error) {
	var s uint64
	for _, t := range ts {
		b, err := t.Bytes(ctx)
		if err != nil {
			return 0, err
		}
		s += sumWords(b)
		t.Release()
	}
	return s, nil
}

// sumWords adds up b's 64-bit words (the native byte order, little endian
// on the platforms goray runs on) reading memory at full speed; a trailing
// partial word is ignored.
func sumWords(b []byte) uint64 {
	n := len(b) / 8
	if n == 0 {
		return 0
	}
	w := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), n)
	var s0, s1, s2, s3 uint64
	i := 0
	for ; i+4 <= n; i += 4 {
		s0 += w[i]
		s1 += w[i+1]
		s2 += w[i+2]
		s3 += w[i+3]
	}
	for ; i < n; i++ {
		s0 += w[i]
	}
	return s0 + s1 + s2 + s3
}

var (
	tensorProducerClass = ray.Actor0(newTensorProducer)
	tensorConsumerClass = ray.Actor0(newTensorConsumer)
	tensorMake          = ray.Method1((*tensorProducer).make).TensorTransport(shmTransport)
	tensorSum           = ray.Method1((*tensorConsumer).sum)
)

// transportMissing reports whether err says the node has no such
// transport (an actor declaring it could not be created).
func transportMissing(err error, name string) bool {
	return err != nil && strings.Contains(err.Error(), fmt.Sprintf("transport %q is not registered", name))
}

// tensorTransferSetup creates a producer and a consumer actor declaring the
// shm transport; one call moves a fresh size-byte tensor from the producer
// to the consumer, which reads all of it, and drops the reference so the
// transport collects the segment.
func (e *env) tensorTransferSetup(size int) setupFunc {
	return func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
		if e.shmUnavailable != "" {
			return nil, nil, &notAvailableError{reason: e.shmUnavailable}
		}
		p := tensorProducerClass.Options(ray.Transports(shmTransport)).Remote(ctx)
		c := tensorConsumerClass.Options(ray.Transports(shmTransport)).Remote(ctx)
		teardown := func(ctx context.Context) {
			_ = p.Kill(ctx)
			_ = c.Kill(ctx)
		}
		for _, err := range []error{p.Ready(ctx), c.Ready(ctx)} {
			if err == nil {
				continue
			}
			teardown(ctx)
			if transportMissing(err, shmTransport) {
				return nil, nil, &notAvailableError{reason: "the node has no shm transport plugin: " + err.Error()}
			}
			return nil, nil, err
		}
		pages := uint64(size / tensorPage)
		want := pages * (pages + 1) / 2
		fn := func(ctx context.Context) error {
			ref := tensorMake.On(p).Remote(ctx, ray.V(size))
			sum := tensorSum.On(c).Remote(ctx, ref)
			got, err := sum.Get(ctx)
			sum.Release()
			ref.Release()
			if err == nil && got != want {
				err = fmt.Errorf("the consumer read a sum of %d, want %d: the tensor's bytes did not arrive", got, want)
			}
			return err
		}
		return fn, teardown, nil
	}
}

// tensorTransferMetric is tensor_transfer_shm_actor_to_actor.
func (e *env) tensorTransferMetric() workload {
	size, sizeNote := 64<<20, ""
	if e.quick {
		size, sizeNote = 8<<20, "; quick mode: smaller tensor"
	}
	return workload{
		name: MetricTensorTransferShm, unit: UnitGBps, mult: float64(size) / 1e9,
		note: fmt.Sprintf("goray's own; nearest Ray workload: none measured (Ray's tensor transports, @ray.method(tensor_transport=...), have no microbenchmark); per call a producer actor returns a fresh %s float32 tensor by the shm transport (new segment, one word written per page), "+
			"a consumer actor receives it as an argument and reads every byte, the reference is dropped; figure = tensor bytes ÷ time (GB = 10^9 bytes); "+
			"ratio = transfer bandwidth ÷ memcpy bandwidth%s", humanize.IBytes(uint64(size)), sizeNote),
		limit: LimitMemcpy, ratio: func(mean, limit float64) float64 { return mean / limit },
		transport: shmTransport,
		setup:     e.tensorTransferSetup(size),
	}
}
