package tcptemplate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// TestHealthReportsDeadListener kills the data listener behind the
// transport's back, as a failing network stack would, and expects Health to
// say so (the host then restarts the plugin).
func TestHealthReportsDeadListener(t *testing.T) {
	c := DefaultConfig()
	c.SegmentPrefix = shmem.Prefix + "tt-tcp-unit-"
	tr := New(WithConfig(c))
	defer tr.Close()
	if err := tr.Health(context.Background()); err != nil {
		t.Fatalf("Health before listening: %v", err)
	}
	if _, err := tr.listen(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Health(context.Background()); err != nil {
		t.Fatalf("Health while listening: %v", err)
	}
	tr.mu.Lock()
	ln := tr.ln
	tr.mu.Unlock()
	_ = ln.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := tr.Health(context.Background())
		if err != nil {
			if !strings.Contains(err.Error(), "stopped accepting") {
				t.Fatalf("Health = %v, want it to name the dead listener", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Health still reports healthy 5 s after the listener died")
		}
		time.Sleep(5 * time.Millisecond) // polling
	}
	_ = tr.Close()
	if err := tr.Health(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Health after Close = %v, want ErrClosed", err)
	}
}
