// Command weight-sync is the weight synchronisation of reinforcement
// learning on goray: a trainer actor publishes a new version of its model
// weights at every step, and several inference actors, spread over the
// cluster's nodes, pull them with the "onesided" transport (a remote read
// of the trainer's registered memory, as NIXL does: the trainer never
// sends). Every reader hashes the bytes it loaded and the driver compares
// the hashes with the trainer's.
//
// The trainer's method is registered with .TensorTransport("onesided"), so
// its result stays in the trainer's shared memory; passing the reference
// to the readers makes each of them read it through its node's plugin:
// over TCP from another machine (or with same_node_shm = false), through
// shared memory on the same machine. The reference's release lets the
// trainer's plugin deregister and free the weights.
//
// Run it from the repository root on a cluster whose nodes load the plugin
// (node.hcl here; make plugins builds the plugin into ./bin/plugins):
//
//	make plugins
//	goray start --head --port 6379 --config examples/weight-sync/node.hcl
//	goray start --address 127.0.0.1:6379 --node-ip 127.0.0.2 --config examples/weight-sync/node.hcl
//	GORAY_ADDRESS=127.0.0.1:6379 go run ./examples/weight-sync -readers 4 -mib 64
//	goray stop
//
// Without GORAY_ADDRESS it starts an embedded single-node cluster that
// loads the plugin from -plugin-dir (default ./bin/plugins). It exits
// non-zero when a reader loaded different bytes.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/sdk/ray"
	"github.com/goray-dev/goray/sdk/transport"
)

// backend is the one-sided transport plugin.
const backend = "onesided"

// Trainer owns the model and publishes its weights.
type Trainer struct {
	digest map[int]string
}

// NewTrainer is Trainer's constructor.
func NewTrainer(ctx context.Context) (*Trainer, error) {
	return &Trainer{digest: map[int]string{}}, nil
}

// Publish "trains" one step (the weights of step s are a function of s)
// and returns them as a tensor in shared memory; by the onesided transport
// the tensor stays here until readers pull it.
func (t *Trainer) Publish(ctx context.Context, p PublishArgs) ([]transport.Tensor, error) {
	w, err := transport.NewTensor(transport.Float32, int64(p.Elements))
	if err != nil {
		return nil, err
	}
	b, err := w.Bytes(ctx)
	if err != nil {
		_ = w.Free()
		return nil, err
	}
	for i := 0; i < p.Elements; i++ {
		v := float32(math.Sin(float64(i)*0.001+float64(p.Step))) / float32(p.Step)
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	sum := sha256.Sum256(b)
	t.digest[p.Step] = hex.EncodeToString(sum[:])
	w.Release()
	return []transport.Tensor{w}, nil // the transport owns the segment now
}

// Digest returns the sha256 of the weights published at step.
func (t *Trainer) Digest(ctx context.Context, step int) (string, error) {
	d, ok := t.digest[step]
	if !ok {
		return "", fmt.Errorf("no weights published at step %d", step)
	}
	return d, nil
}

// PublishArgs says what to publish.
type PublishArgs struct {
	Step, Elements int
}

// Reader serves inference with the latest weights it loaded.
type Reader struct {
	weights []byte
	step    int
}

// NewReader is Reader's constructor.
func NewReader(ctx context.Context) (*Reader, error) { return &Reader{}, nil }

// Loaded is what a reader reports after loading weights.
type Loaded struct {
	Node    string
	Digest  string
	Seconds float64 // hashing and copying into the reader's memory
}

// Load copies the received weights into the reader's own memory (its
// "model"), hashes them and lets go of the received tensors.
func (r *Reader) Load(ctx context.Context, ts []transport.Tensor) (Loaded, error) {
	if len(ts) != 1 {
		return Loaded{}, fmt.Errorf("want one weight tensor, got %d", len(ts))
	}
	start := time.Now()
	b, err := ts[0].Bytes(ctx)
	if err != nil {
		return Loaded{}, err
	}
	r.weights = append(r.weights[:0], b...)
	ts[0].Release()
	if err := ray.ReleaseTensors(ts); err != nil { // frees a copy made for this process
		return Loaded{}, err
	}
	sum := sha256.Sum256(r.weights)
	r.step++
	return Loaded{Node: ray.NodeID(), Digest: hex.EncodeToString(sum[:]), Seconds: time.Since(start).Seconds()}, nil
}

var (
	TrainerActor = ray.Actor0(NewTrainer)
	Publish      = ray.Method1((*Trainer).Publish).TensorTransport(backend)
	Digest       = ray.Method1((*Trainer).Digest)
	ReaderActor  = ray.Actor0(NewReader)
	Load         = ray.Method1((*Reader).Load)

	readers   = flag.Int("readers", 4, "number of inference actors")
	mib       = flag.Int("mib", 64, "size of the weights in MiB (float32)")
	steps     = flag.Int("steps", 3, "training steps, each publishing new weights")
	pluginDir = flag.String("plugin-dir", "bin/plugins", "where an embedded node finds goray-transport-onesided (ignored with GORAY_ADDRESS)")
)

func main() {
	flag.Parse() // workers start without arguments: flags keep their defaults there
	ctx := context.Background()
	var opts []ray.InitOption
	if os.Getenv(ray.EnvAddress) == "" && !ray.IsWorker() {
		cfg := config.Default()
		cfg.PluginDir = *pluginDir
		cfg.Plugins = []config.Plugin{{Kind: "transport", Name: backend}}
		opts = append(opts, ray.WithConfig(cfg))
	}
	rt, err := ray.Init(ctx, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
	err = run(ctx)
	rt.Shutdown(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("OK")
}

func run(ctx context.Context) error {
	if *readers < 1 || *mib < 1 || *steps < 1 {
		return errors.New("-readers, -mib and -steps must be positive")
	}
	nodes, err := ray.Nodes(ctx)
	if err != nil {
		return err
	}
	var alive []string
	for _, n := range nodes {
		if n.Alive {
			alive = append(alive, n.ID)
		}
	}
	opt := ray.Transports(backend)
	trainer := TrainerActor.Options(opt, ray.NodeAffinity(alive[0], true)).Remote(ctx)
	rs := make([]ray.ActorHandle[Reader], *readers)
	for i := range rs {
		// Readers go round the nodes, starting with the trainer's next one.
		rs[i] = ReaderActor.Options(opt, ray.NodeAffinity(alive[(i+1)%len(alive)], true)).Remote(ctx)
	}
	defer func() {
		_ = trainer.Kill(context.Background())
		for _, r := range rs {
			_ = r.Kill(context.Background())
		}
	}()
	for _, a := range append([]interface{ Ready(context.Context) error }{trainer}, actorsOf(rs)...) {
		if err := a.Ready(ctx); err != nil {
			return fmt.Errorf("actor: %w (does every node load the %q transport plugin?)", err, backend)
		}
	}
	elements := *mib << 20 / 4
	var used []string
	for step := 1; step <= *steps; step++ {
		start := time.Now()
		weights := Publish.On(trainer).Remote(ctx, ray.V(PublishArgs{Step: step, Elements: elements}))
		loads := make([]ray.Ref[Loaded], len(rs))
		for i, r := range rs {
			loads[i] = Load.On(r).Remote(ctx, weights)
		}
		got, err := ray.GetAll(ctx, loads)
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		elapsed := time.Since(start)
		want, err := Digest.On(trainer).Remote(ctx, ray.V(step)).Get(ctx)
		if err != nil {
			return err
		}
		for i, l := range got {
			if l.Digest != want {
				return fmt.Errorf("step %d: reader %d on node %s loaded weights with sha256 %s, the trainer published %s", step, i, l.Node[:8], l.Digest, want)
			}
			if !slices.Contains(used, l.Node) {
				used = append(used, l.Node)
			}
		}
		weights.Release() // the trainer's plugin deregisters and frees them
		fmt.Printf("step %d: %d readers pulled %d MiB each in %v (%.2f GB/s aggregate), sha256 %s… matches\n",
			step, len(rs), *mib, elapsed.Round(time.Millisecond), float64(len(rs))*float64(elements*4)/elapsed.Seconds()/1e9, want[:12])
	}
	fmt.Printf("weight-sync: %d steps, %d readers on %d nodes loaded the trainer's exact bytes\n", *steps, len(rs), len(used))
	return nil
}

func actorsOf(rs []ray.ActorHandle[Reader]) []interface{ Ready(context.Context) error } {
	out := make([]interface{ Ready(context.Context) error }, len(rs))
	for i, r := range rs {
		out[i] = r
	}
	return out
}
