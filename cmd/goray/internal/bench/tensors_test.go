package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/goray-dev/goray/sdk/ray"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

func TestShmNodeConfig(t *testing.T) {
	cfg, cleanup, err := shmNodeConfig()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(cfg.PluginDir, ShmPluginBinary)
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatalf("plugin link: %v", err)
	}
	exe, _ := os.Executable()
	if target != exe {
		t.Errorf("%s points at %s, want this executable %s", link, target, exe)
	}
	if len(cfg.Plugins) != 1 || cfg.Plugins[0].Kind != "transport" || cfg.Plugins[0].Name != "shm" {
		t.Errorf("plugins = %+v, want one transport \"shm\" block", cfg.Plugins)
	}
	cleanup()
	if _, err := os.Stat(cfg.PluginDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("plugin dir %s after cleanup: %v, want it removed", cfg.PluginDir, err)
	}
}

func TestMaybeServeTransportReturnsUnlessNamedAsPlugin(t *testing.T) {
	// This test binary is not named goray-transport-shm: the call returns.
	MaybeServeTransport()
	if !transportHook.Load() {
		t.Fatal("MaybeServeTransport did not record that the binary can serve the plugin")
	}
}

func TestTransportMissing(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{fmt.Errorf("%w: transport %q is not registered on node ab12 (registered transports: [])", ray.ErrActorDied, "shm"), true},
		{fmt.Errorf("transport %q is not registered on node ab12", "nccl"), false},
	}
	for _, tc := range tests {
		if got := transportMissing(tc.err, "shm"); got != tc.want {
			t.Errorf("transportMissing(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestSumWords(t *testing.T) {
	b := make([]byte, 8*7+3) // 7 words and a partial one
	for i := range 7 {
		b[8*i] = byte(i + 1)
		b[8*i+1] = 1 // + 256 per word
	}
	b[len(b)-1] = 0xff // partial word: ignored
	if got, want := sumWords(b), uint64(28+7*256); got != want {
		t.Fatalf("sumWords = %d, want %d", got, want)
	}
	if got := sumWords(b[:5]); got != 0 {
		t.Fatalf("sumWords of a partial word = %d, want 0", got)
	}
}

// TestProducerConsumerInProcess runs the workload's actor methods directly:
// the producer writes one word per page of a fresh segment, the consumer's
// sum proves every page was read.
func TestProducerConsumerInProcess(t *testing.T) {
	ctx := context.Background()
	if _, err := (&tensorProducer{}).make(ctx, 4096+1); err == nil {
		t.Fatal("make accepted a size that is not a multiple of the page stride")
	}
	ts, err := (&tensorProducer{}).make(ctx, 3*tensorPage)
	if err != nil {
		t.Fatal(err)
	}
	seg := ts[0].Buffer.Segment
	defer func() {
		if err := ts[0].Free(); err != nil {
			t.Error(err)
		}
		if shmem.Exists(seg) {
			t.Errorf("segment %s left behind", seg)
		}
	}()
	if ts[0].ByteSize() != 3*tensorPage {
		t.Fatalf("tensor of %d bytes, want %d", ts[0].ByteSize(), 3*tensorPage)
	}
	got, err := (&tensorConsumer{}).sum(ctx, ts)
	if err != nil || got != 1+2+3 {
		t.Fatalf("sum = %d, %v; want 6", got, err)
	}
}
