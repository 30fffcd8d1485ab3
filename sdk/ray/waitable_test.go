package ray_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// gatedYield yields 1 once the file gate exists, then ends.
func gatedYield(ctx context.Context, gate string, yield func(int) error) error {
	for {
		if _, err := os.Stat(gate); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return yield(1)
}

// GatedYield is gatedYield as a generator task.
var GatedYield = ray.Generator1(gatedYield)

// TestWaitMixed: Wait takes refs of any type, generator streams and
// placement groups in one []ray.Waitable, as Ray's ray.wait takes object
// refs, generators and pg.ready(): a ref is ready once its value is
// known, a stream once Next would not wait (an item arrived, or it
// ended), a group once it is created or removed; each is taken once.
func TestWaitMixed(t *testing.T) {
	ctx := testCtx(t)
	gate := filepath.Join(t.TempDir(), "go")
	st := GatedYield.Remote(ctx, ray.V(gate))
	defer st.Close()
	pending := createPG(t, ctx, []ray.Bundle{{"CPU": 16}}, ray.Pack) // more than the node has: never created
	slow := SleepFor.Options(ray.CPUs(0)).Remote(ctx, ray.V(30*time.Second))
	fast := SleepFor.Remote(ctx, ray.V(time.Millisecond))

	ids := func(ws []ray.Waitable) []string {
		var out []string
		for _, w := range ws {
			out = append(out, w.ID())
		}
		return out
	}
	all := []ray.Waitable{st, pending, slow, fast}
	ready, notReady, err := ray.Wait(ctx, all, 1, ray.NoTimeout)
	if err != nil || len(ready) != 1 || ready[0].ID() != fast.ID() || len(notReady) != 3 {
		t.Fatalf("Wait(all, 1): ready %v, not ready %v, %v; want only the fast task's ref", ids(ready), ids(notReady), err)
	}
	// Looked at once: the stream has no item yet and the group is not
	// created.
	if ready, _, err = ray.Wait(ctx, all, 4, 0); err != nil || len(ready) != 1 || ready[0].ID() != fast.ID() {
		t.Fatalf("Wait(all, 4, 0): ready %v, %v; want only the fast task's ref", ids(ready), err)
	}

	// The stream is ready once its item is here.
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ready, _, err = ray.Wait(ctx, []ray.Waitable{pending, slow, st}, 1, ray.NoTimeout)
	if err != nil || len(ready) != 1 || ready[0].ID() != st.ID() {
		t.Fatalf("Wait(group, slow, stream, 1) after the item was yielded: ready %v, %v; want the stream", ids(ready), err)
	}
	if st.Buffered() != 1 {
		t.Fatalf("the stream was ready with %d items here; want 1", st.Buffered())
	}
	if r, err := st.Next(ctx); err != nil {
		t.Fatal(err)
	} else if v, err := r.Get(ctx); err != nil || v != 1 {
		t.Fatalf("the item: %d, %v", v, err)
	}
	// Ended, it is ready again: Next returns io.EOF at once.
	if ready, _, err = ray.Wait(ctx, []ray.Waitable{st}, 1, ray.NoTimeout); err != nil || len(ready) != 1 {
		t.Fatalf("Wait on the ended stream: ready %v, %v", ids(ready), err)
	}
	if _, err := st.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after the end: %v, want io.EOF", err)
	}

	// A group is ready once created; a removed one is ready too, and its
	// Wait says it was removed.
	created := createPG(t, ctx, []ray.Bundle{{"CPU": 0.5}}, ray.Pack)
	ready, _, err = ray.Wait(ctx, []ray.Waitable{pending, created}, 1, ray.NoTimeout)
	if err != nil || len(ready) != 1 || ready[0].ID() != created.ID() {
		t.Fatalf("Wait(pending group, created group, 1): ready %v, %v; want the created group", ids(ready), err)
	}
	if err := ray.RemovePlacementGroup(ctx, pending); err != nil {
		t.Fatal(err)
	}
	if ready, _, err = ray.Wait(ctx, []ray.Waitable{slow, pending}, 1, ray.NoTimeout); err != nil || len(ready) != 1 || ready[0].ID() != pending.ID() {
		t.Fatalf("Wait on a removed group: ready %v, %v; want it", ids(ready), err)
	}
	if err := pending.Wait(ctx); !errors.Is(err, ray.ErrPlacementGroupRemoved) {
		t.Fatalf("the removed group's Wait: %v", err)
	}
	// A loop polling with timeout 0 sees a group ready once it is.
	polled := createPG(t, ctx, []ray.Bundle{{"CPU": 0.5}}, ray.Pack)
	waitFor(t, "a poll with timeout 0 to see the new group ready", func() bool {
		ready, _, err := ray.Wait(ctx, []ray.Waitable{polled}, 1, 0)
		return err == nil && len(ready) == 1
	})

	for _, tc := range []struct {
		name string
		ws   []ray.Waitable
		want string
	}{
		{"a stream twice", []ray.Waitable{st, fast, st}, "refs 0 and 2 are the same stream"},
		{"a group twice", []ray.Waitable{created, created}, "refs 0 and 1 are the same placement group"},
		{"a ref twice", []ray.Waitable{fast, slow, fast}, "refs 0 and 2 are the same object"},
		{"nil", []ray.Waitable{fast, nil}, "ref 1 is nil"},
		{"a nil stream", []ray.Waitable{(*ray.Stream[int])(nil)}, "ref 0: a nil Stream"},
		{"a zero ref", []ray.Waitable{ray.Ref[int]{}}, "ref 0: a zero Ref"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := ray.Wait(ctx, tc.ws, 1, ray.NoTimeout); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error saying %q, got %v", tc.want, err)
			}
		})
	}
}
