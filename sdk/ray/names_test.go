package ray_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/ray"
)

// TestKilledActorNameIsFree: once an actor is killed its name is free at
// once (as Ray's get_actor raises): GetActor says ErrActorNotFound, and
// the name can be taken by a new actor, which GetActor then finds.
func TestKilledActorNameIsFree(t *testing.T) {
	ctx := testCtx(t)
	c, err := CounterA.Options(ray.Name("doomed")).New(ctx, ray.V(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if h, err := ray.GetActor[Counter](ctx, "doomed"); err != nil || h.ID() != c.ID() {
		t.Fatalf("GetActor of the live actor: %v, %v", h.ID(), err)
	}
	if err := c.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := ray.GetActor[Counter](ctx, "doomed")
	if !errors.Is(err, ray.ErrActorNotFound) || !strings.Contains(err.Error(), `"doomed"`) {
		t.Fatalf("GetActor right after Kill: handle %s, error %v; want ErrActorNotFound naming it", h.ID(), err)
	}
	again, err := CounterA.Options(ray.Name("doomed")).New(ctx, ray.V(2))
	if err != nil {
		t.Fatalf("the name of a killed actor is not free: %v", err)
	}
	defer again.Kill(ctx)
	h, err = ray.GetActor[Counter](ctx, "doomed")
	if err != nil || h.ID() != again.ID() {
		t.Fatalf("GetActor after the name was taken again: %s, %v; want %s", h.ID(), err, again.ID())
	}
	if v, err := Inc.On(h).Remote(ctx, ray.V(1)).Get(ctx); err != nil || v != 3 {
		t.Fatalf("call on the new holder: %d, %v; want 3", v, err)
	}
}

// TestActorNameTakenAtCreation: creating an actor with a name a live actor
// holds fails at creation, with a typed error naming the name and the
// holder: from New as its error, from Remote's handle at once (Ready and
// calls), and the holder is untouched.
func TestActorNameTakenAtCreation(t *testing.T) {
	ctx := testCtx(t)
	holder, err := CounterA.Options(ray.Name("taken")).New(ctx, ray.V(10))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Kill(ctx)

	check := func(what string, err error) {
		t.Helper()
		var nt *ray.ActorNameTakenError
		if !errors.As(err, &nt) || !errors.Is(err, ray.ErrActorNameTaken) || !errors.Is(err, ray.ErrActorDied) {
			t.Fatalf("%s: %T %v; want *ray.ActorNameTakenError matching ErrActorNameTaken and ErrActorDied", what, err, err)
		}
		if nt.Name != "taken" || nt.Holder.String() != holder.ID() || !strings.HasSuffix(nt.HolderClass, "Counter") {
			t.Fatalf("%s: name %q holder %s (%s); want %q held by %s", what, nt.Name, nt.Holder, nt.HolderClass, "taken", holder.ID())
		}
		if msg := err.Error(); !strings.Contains(msg, `"taken"`) || !strings.Contains(msg, holder.ID()) {
			t.Fatalf("%s: message %q does not name the name and the holder", what, msg)
		}
	}
	dup, err := CounterA.Options(ray.Name("taken")).New(ctx, ray.V(0))
	check("New", err)
	check("Ready of New's handle", dup.Ready(ctx))

	// Remote's handle knows at once: no wait for a lease or a constructor.
	soon, cancel := context.WithTimeout(ctx, waitfor.Generous) // a correct run answers at once
	defer cancel()
	h := CounterA.Options(ray.Name("taken")).Remote(soon, ray.V(0))
	check("Ready of Remote's handle", h.Ready(soon))
	_, err = Inc.On(h).Remote(soon, ray.V(1)).Get(soon)
	check("a call on Remote's handle", err)

	if v, err := Inc.On(holder).Remote(ctx, ray.V(1)).Get(ctx); err != nil || v != 11 {
		t.Fatalf("the holder after the clashes: %d, %v; want 11", v, err)
	}
	if g, err := ray.GetActor[Counter](ctx, "taken"); err != nil || g.ID() != holder.ID() {
		t.Fatalf("GetActor after the clashes: %s, %v; want the holder %s", g.ID(), err, holder.ID())
	}
}
