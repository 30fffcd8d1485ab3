package ray_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/goray-dev/goray/sdk/ray"
)

// incByName finds the Counter named name in the job's namespace from a
// worker and increments it.
func incByName(ctx context.Context, name string) (int, error) {
	h, err := ray.GetActor[Counter](ctx, name)
	if err != nil {
		return 0, err
	}
	return Inc.On(h).Remote(ctx, ray.V(1)).Get(ctx)
}

var IncByName = ray.Task1(incByName)

// TestJobNamespace: a job that names no namespace has one of its own,
// which its workers share; GetActor looks there unless InNamespace says
// otherwise.
func TestJobNamespace(t *testing.T) {
	ctx := testCtx(t)
	if ns := rt.Namespace(); ns != "anonymous-"+rt.JobID() {
		t.Fatalf("Namespace() = %q, want anonymous-<job id>", ns)
	}
	c, err := CounterA.Options(ray.Name("ns-counter")).New(ctx, ray.V(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill(ctx)
	if v, err := IncByName.Remote(ctx, ray.V("ns-counter")).Get(ctx); err != nil || v != 1 {
		t.Fatalf("a worker's GetActor in the job's namespace: %d, %v; want 1", v, err)
	}
	if h, err := ray.GetActor[Counter](ctx, "ns-counter", ray.InNamespace(rt.Namespace())); err != nil || h.ID() != c.ID() {
		t.Fatalf("GetActor InNamespace(the job's): %s, %v; want %s", h.ID(), err, c.ID())
	}
	_, err = ray.GetActor[Counter](ctx, "ns-counter", ray.InNamespace("elsewhere"))
	if !errors.Is(err, ray.ErrActorNotFound) || !strings.Contains(err.Error(), `"ns-counter" in namespace "elsewhere"`) {
		t.Fatalf("GetActor in another namespace: %v; want ErrActorNotFound naming the name and namespace", err)
	}
}

// TestGetIfExistsSharesOneActor: concurrent GetIfExists creations of one
// name all get the same actor, whose constructor ran once.
func TestGetIfExistsSharesOneActor(t *testing.T) {
	ctx := testCtx(t)
	const creators = 8
	handles := make([]ray.ActorHandle[Counter], creators)
	errs := make([]error, creators)
	var wg sync.WaitGroup
	for i := range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			handles[i], errs[i] = CounterA.Options(ray.Name("shared"), ray.GetIfExists()).New(ctx, ray.V(100))
		}()
	}
	wg.Wait()
	for i := range creators {
		if errs[i] != nil || handles[i].ID() != handles[0].ID() {
			t.Fatalf("creator %d: %s, %v; want actor %s like creator 0", i, handles[i].ID(), errs[i], handles[0].ID())
		}
	}
	defer handles[0].Kill(ctx)
	for i, h := range handles {
		if v, err := Inc.On(h).Remote(ctx, ray.V(1)).Get(ctx); err != nil || v != 100+i+1 {
			t.Fatalf("call %d on the shared actor: %d, %v; want %d (one constructor, one state)", i, v, err, 100+i+1)
		}
	}
}

// TestActorLifetimeOptions: options that cannot work are errors that say
// why.
func TestActorLifetimeOptions(t *testing.T) {
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		opts []ray.Option
		want string
	}{
		{"detached without a name", []ray.Option{ray.Lifetime(ray.DetachedLifetime)}, "a detached actor must be named"},
		{"unknown lifetime", []ray.Option{ray.Name("x"), ray.Lifetime(ray.ActorLifetime(7))}, "Lifetime(ActorLifetime(7)): not OwnedLifetime or DetachedLifetime"},
		{"get-if-exists without a name", []ray.Option{ray.GetIfExists()}, "GetIfExists: only a named actor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := CounterA.Options(tc.opts...).New(ctx, ray.V(0))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want an error saying %q", err, tc.want)
			}
			if rerr := h.Ready(ctx); !errors.Is(rerr, ray.ErrActorDied) {
				t.Fatalf("Ready of the refused actor: %v; want ErrActorDied", rerr)
			}
		})
	}
}

// TestActorNamespace ports test_namespace.py's case of an actor created in
// another namespace (Ray's .options(name=..., namespace=...)): GetActor
// finds it there, not in the job's namespace, and the same name is free
// in the job's; GetIfExists looks in the actor's namespace; an unnamed
// actor or a task given ActorNamespace fails, saying why.
func TestActorNamespace(t *testing.T) {
	ctx := testCtx(t)
	other, err := CounterA.Options(ray.Name("ns-shared"), ray.ActorNamespace("other-ns")).New(ctx, ray.V(5))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Kill(ctx)
	if h, err := ray.GetActor[Counter](ctx, "ns-shared", ray.InNamespace("other-ns")); err != nil || h.ID() != other.ID() {
		t.Fatalf("GetActor in the actor's namespace: %s, %v; want %s", h.ID(), err, other.ID())
	}
	if _, err := ray.GetActor[Counter](ctx, "ns-shared"); !errors.Is(err, ray.ErrActorNotFound) {
		t.Fatalf("GetActor in the job's namespace: %v; want ErrActorNotFound", err)
	}
	mine, err := CounterA.Options(ray.Name("ns-shared")).New(ctx, ray.V(0))
	if err != nil {
		t.Fatalf("the same name in the job's namespace: %v", err)
	}
	defer mine.Kill(ctx)
	again, err := CounterA.Options(ray.Name("ns-shared"), ray.ActorNamespace("other-ns"), ray.GetIfExists()).New(ctx, ray.V(0))
	if err != nil || again.ID() != other.ID() {
		t.Fatalf("GetIfExists in the actor's namespace: %s, %v; want %s", again.ID(), err, other.ID())
	}
	if v, err := Inc.On(again).Remote(ctx, ray.V(1)).Get(ctx); err != nil || v != 6 {
		t.Fatalf("a call on the actor found: %d, %v; want 6", v, err)
	}
	unnamed := CounterA.Options(ray.ActorNamespace("other-ns")).Remote(ctx, ray.V(0))
	if err := unnamed.Ready(ctx); err == nil || !strings.Contains(err.Error(), "only a named actor") {
		t.Fatalf("an unnamed actor with ActorNamespace: %v; want an error saying it must be named", err)
	}
	if _, err := Add.Options(ray.ActorNamespace("other-ns")).Remote(ctx, ray.V(1), ray.V(2)).Get(ctx); err == nil || !strings.Contains(err.Error(), "not tasks") {
		t.Fatalf("a task with ActorNamespace: %v; want an error saying it applies to actors", err)
	}
	bad := CounterA.Options(ray.Name("x"), ray.ActorNamespace("")).Remote(ctx, ray.V(0))
	if err := bad.Ready(ctx); err == nil || !strings.Contains(err.Error(), `ActorNamespace("")`) {
		t.Fatalf("an empty namespace: %v; want an error naming it", err)
	}
}
