package ray_test

import (
	"context"
	"errors"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// pgTask reports where it runs: its placement group and bundle.
func pgTask(ctx context.Context, _ int) (ray.TaskContext, error) {
	tc, _ := ray.CurrentTask(ctx)
	return tc, nil
}

// pgParent submits pgTask (with Spread when spread) and returns the
// child's view.
func pgParent(ctx context.Context, how string) (ray.TaskContext, error) {
	var opts []ray.Option
	switch how {
	case "spread":
		opts = append(opts, ray.Spread())
	case "default":
		opts = append(opts, ray.DefaultScheduling())
	}
	return PGTask.Options(opts...).Remote(ctx, ray.V(0)).Get(ctx)
}

// PGActor is an actor placed in a group.
type PGActor struct{}

func newPGActor(ctx context.Context, _ int) (*PGActor, error) { return &PGActor{}, nil }

// Where returns the actor's view of its placement.
func (a *PGActor) Where(ctx context.Context) (ray.TaskContext, error) {
	tc, _ := ray.CurrentTask(ctx)
	return tc, nil
}

// Child runs pgTask from the actor.
func (a *PGActor) Child(ctx context.Context) (ray.TaskContext, error) {
	return PGTask.Remote(ctx, ray.V(0)).Get(ctx)
}

var (
	PGTask   = ray.Task1(pgTask)
	PGParent = ray.Task1(pgParent)
	PGActorA = ray.Actor1(newPGActor)
	PGWhere  = ray.Method0((*PGActor).Where)
	PGChild  = ray.Method0((*PGActor).Child)
)

// createPG creates a group and removes it when the test ends.
func createPG(t *testing.T, ctx context.Context, bundles []ray.Bundle, s ray.PlacementStrategy, opts ...ray.PlacementGroupOption) *ray.PlacementGroup {
	t.Helper()
	pg, err := ray.CreatePlacementGroup(ctx, bundles, s, opts...)
	if err != nil {
		t.Fatalf("CreatePlacementGroup: %v", err)
	}
	t.Cleanup(func() { _ = ray.RemovePlacementGroup(context.Background(), pg) })
	return pg
}

// waitResources polls until the cluster's available resources equal its
// totals: nothing held, no placement group resources left.
func waitResourcesFree(t *testing.T, ctx context.Context) {
	t.Helper()
	var total, avail map[string]float64
	waitFor(t, "available resources back to the totals", func() bool {
		var err1, err2 error
		total, err1 = ray.ClusterResources(ctx)
		avail, err2 = ray.AvailableResources(ctx)
		return err1 == nil && err2 == nil && maps.Equal(total, avail) && !hasGroupResources(total)
	})
}

func hasGroupResources(m map[string]float64) bool {
	for k := range m {
		if strings.Contains(k, "_group_") {
			return true
		}
	}
	return false
}

func TestPlacementGroupBadBundles(t *testing.T) {
	ctx := testCtx(t)
	for _, tt := range []struct {
		name     string
		bundles  []ray.Bundle
		strategy ray.PlacementStrategy
		want     string
	}{
		{"no bundles", nil, ray.Pack, "no bundles"},
		{"empty bundle", []ray.Bundle{{"CPU": 1}, {}}, ray.Pack, "bundle 1 is empty"},
		{"only zeros", []ray.Bundle{{"CPU": 0}}, ray.Pack, "bundle 0 is empty"},
		{"negative", []ray.Bundle{{"CPU": -1}}, ray.Pack, `bundle 0 {CPU: -1}: resource "CPU": amount must be a finite number >= 0`},
		{"NaN", []ray.Bundle{{"GPU": math.NaN()}}, ray.Pack, `resource "GPU"`},
		{"group resource", []ray.Bundle{{"CPU_group_0_abc": 1}}, ray.Pack, "is a placement group resource"},
		{"unknown strategy", []ray.Bundle{{"CPU": 1}}, "CLUSTERED", `unknown strategy "CLUSTERED"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pg, err := ray.CreatePlacementGroup(ctx, tt.bundles, tt.strategy)
			if err == nil {
				_ = ray.RemovePlacementGroup(ctx, pg)
				t.Fatalf("CreatePlacementGroup(%v, %s) succeeded, want an error containing %q", tt.bundles, tt.strategy, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestBundleTooSmall(t *testing.T) {
	ctx := testCtx(t)
	// Infeasible on this 2-CPU node, so it stays pending: the check is the
	// submitter's, against the bundles' shapes.
	pg := createPG(t, ctx, []ray.Bundle{{"CPU": 1}, {"CPU": 4, "GPU": 1}}, ray.StrictPack)
	_, err := PGTask.Options(ray.InPlacementGroup(pg, 0), ray.CPUs(2)).Remote(ctx, ray.V(0)).Get(ctx)
	var small *ray.BundleTooSmallError
	if !errors.As(err, &small) {
		t.Fatalf("task asking {CPU: 2} of bundle {CPU: 1}: %v, want *BundleTooSmallError", err)
	}
	if small.Bundle != 0 || small.Group != pg.ID() || small.Has["CPU"] != 1 || small.Want["CPU"] != 2 {
		t.Errorf("error %+v, want bundle 0 of %s holding CPU 1, wanting CPU 2", small, pg.ID())
	}
	for _, want := range []string{"bundle 0", pg.ID()[:8], "{CPU: 1}", "{CPU: 2}", "ray_test.pgTask"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}

	// AnyBundle: none holds a GPU and 8 CPUs; the largest is named.
	_, err = PGTask.Options(ray.InPlacementGroup(pg, ray.AnyBundle), ray.CPUs(8)).Remote(ctx, ray.V(0)).Get(ctx)
	if !errors.As(err, &small) || small.Bundle != ray.AnyBundle || small.Has["GPU"] != 1 || !strings.Contains(err.Error(), "any bundle") {
		t.Errorf("AnyBundle asking CPU 8: %v, want *BundleTooSmallError for any bundle naming the largest", err)
	}

	// An actor is checked the same way, when it is created.
	h := PGActorA.Options(ray.InPlacementGroup(pg, 1), ray.GPUs(2)).Remote(ctx, ray.V(0))
	if err := h.Ready(ctx); !errors.As(err, &small) || small.Bundle != 1 || small.Want["GPU"] != 2 || small.Has["GPU"] != 1 {
		t.Errorf("actor asking GPU 2 of bundle 1: %v, want *BundleTooSmallError", err)
	}

	// A bad index is an error too.
	_, err = PGTask.Options(ray.InPlacementGroup(pg, 2)).Remote(ctx, ray.V(0)).Get(ctx)
	if err == nil || !strings.Contains(err.Error(), "bundle index 2 out of range") {
		t.Errorf("bundle index 2 of 2 bundles: %v, want an out of range error", err)
	}
}

func TestPlacementGroupWaitHonoursContext(t *testing.T) {
	ctx := testCtx(t)
	pg := createPG(t, ctx, []ray.Bundle{{"CPU": 2}, {"CPU": 2}}, ray.StrictPack)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := pg.Wait(wctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("Wait for a group no node fits: %v, want its context's deadline", err)
	}
	if ok, err := pg.WaitTimeout(ctx, 100*time.Millisecond); ok || err != nil {
		t.Errorf("WaitTimeout = %v, %v; want false, nil", ok, err)
	}
	if ok, err := pg.WaitTimeout(ctx, 0); ok || err != nil {
		t.Errorf("WaitTimeout(0) = %v, %v; want false, nil", ok, err)
	}
	var info ray.PlacementGroupInfo
	waitFor(t, "the group flagged infeasible", func() bool {
		info, err = pg.Info(ctx)
		return err == nil && info.Infeasible
	})
	if info.State != "PENDING" || info.Strategy != ray.StrictPack || len(info.Bundles) != 2 || info.BundleNodes[0] != "" {
		t.Errorf("info %+v, want a PENDING STRICT_PACK group of 2 unplaced bundles", info)
	}

	// Removing it ends a Wait in progress with a typed error.
	done := make(chan error, 1)
	go func() { done <- pg.Wait(ctx) }()
	if err := ray.RemovePlacementGroup(ctx, pg); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("Wait did not end when the group was removed")
	}
	var removed *ray.PlacementGroupRemovedError
	if !errors.As(err, &removed) || !errors.Is(err, ray.ErrPlacementGroupRemoved) || !strings.Contains(err.Error(), pg.ID()[:8]) {
		t.Errorf("Wait on a removed group: %v, want *PlacementGroupRemovedError naming it", err)
	}
	if ok, err := pg.WaitTimeout(ctx, 0); ok || !errors.Is(err, ray.ErrPlacementGroupRemoved) {
		t.Errorf("WaitTimeout(0) on a removed group = %v, %v; want false, ErrPlacementGroupRemoved", ok, err)
	}
	if err := ray.RemovePlacementGroup(ctx, pg); err != nil {
		t.Errorf("removing a removed group: %v, want nil", err)
	}
}

func TestPlacementGroupNamedLookup(t *testing.T) {
	ctx := testCtx(t)
	pg := createPG(t, ctx, []ray.Bundle{{"CPU": 16}}, ray.StrictSpread, ray.GroupName("lookup-me"))
	got, err := ray.GetPlacementGroup(ctx, "lookup-me")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID() != pg.ID() || got.Name() != "lookup-me" || got.Strategy() != ray.StrictSpread || len(got.Bundles()) != 1 || got.Bundles()[0]["CPU"] != 16 {
		t.Errorf("GetPlacementGroup = %s %q %s %v, want %s", got.ID(), got.Name(), got.Strategy(), got.Bundles(), pg.ID())
	}
	if _, err := ray.CreatePlacementGroup(ctx, []ray.Bundle{{"CPU": 1}}, ray.Pack, ray.GroupName("lookup-me")); !errors.Is(err, ray.ErrPlacementGroupNameTaken) {
		t.Errorf("second group named lookup-me: %v, want ErrPlacementGroupNameTaken", err)
	}
	all, err := ray.PlacementGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range all {
		found = found || (g.ID == pg.ID() && g.Name == "lookup-me" && g.JobID == rt.JobID() && !g.Detached)
	}
	if !found {
		t.Errorf("PlacementGroups lacks %s named lookup-me of job %s: %+v", pg.ID(), rt.JobID(), all)
	}
	if err := ray.RemovePlacementGroup(ctx, pg); err != nil {
		t.Fatal(err)
	}
	if _, err := ray.GetPlacementGroup(ctx, "lookup-me"); !errors.Is(err, ray.ErrPlacementGroupNotFound) {
		t.Errorf("GetPlacementGroup of a removed group's name: %v, want ErrPlacementGroupNotFound", err)
	}
	createPG(t, ctx, []ray.Bundle{{"CPU": 16}}, ray.Pack, ray.GroupName("lookup-me")) // the name is free again
}

func TestPlacementGroupTasksAndActors(t *testing.T) {
	ctx := testCtx(t)
	pg := createPG(t, ctx, []ray.Bundle{{"CPU": 1}, {"CPU": 1}}, ray.StrictPack)
	if err := pg.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	info, err := pg.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != "CREATED" || info.BundleNodes[0] != rt.NodeID() || info.BundleNodes[1] != rt.NodeID() {
		t.Errorf("info %+v, want CREATED with both bundles on %s", info, rt.NodeID())
	}
	// The node's 2 CPUs are the group's now.
	any := "CPU_group_" + pg.ID()
	waitFor(t, "the bundles reserved out of the node's CPUs", func() bool {
		a, err := ray.AvailableResources(ctx)
		return err == nil && a["CPU"] == 0 && a[any] == 2
	})

	// A task in bundle 1 runs there (its CPU is the bundle's: the node has
	// none free) and knows its group.
	tc, err := PGTask.Options(ray.InPlacementGroup(pg, 1)).Remote(ctx, ray.V(0)).Get(ctx)
	if err != nil {
		t.Fatalf("task in bundle 1: %v", err)
	}
	if tc.PlacementGroupID != pg.ID() || tc.Bundle != 1 {
		t.Errorf("task context %+v, want group %s bundle 1", tc, pg.ID())
	}

	// An actor holding bundle 0's CPU: the bundle's CPU is in use.
	h := PGActorA.Options(ray.InPlacementGroup(pg, 0), ray.CPUs(1)).Remote(ctx, ray.V(0))
	if err := h.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if tc, err := PGWhere.On(h).Remote(ctx).Get(ctx); err != nil || tc.PlacementGroupID != pg.ID() || tc.Bundle != 0 {
		t.Errorf("actor context %+v, %v; want group %s bundle 0", tc, err, pg.ID())
	}
	waitFor(t, "the actor holding bundle 0's CPU", func() bool {
		a, err := ray.AvailableResources(ctx)
		return err == nil && a["CPU_group_0_"+pg.ID()] == 0 && a["CPU_group_1_"+pg.ID()] == 1 && a["CPU"] == 0
	})
	// AnyBundle finds bundle 1 free.
	if tc, err := PGTask.Options(ray.InPlacementGroup(pg, ray.AnyBundle)).Remote(ctx, ray.V(0)).Get(ctx); err != nil || tc.PlacementGroupID != pg.ID() {
		t.Errorf("task in any bundle: %+v, %v", tc, err)
	}

	// Removing the group ends the actor; its callers get a typed error,
	// and new work for the group fails with PlacementGroupRemovedError.
	if err := ray.RemovePlacementGroup(ctx, pg); err != nil {
		t.Fatal(err)
	}
	var died *ray.ActorDiedError
	var callErr error
	waitFor(t, "the actor ended with its group", func() bool {
		_, callErr = PGWhere.On(h).Remote(ctx).Get(ctx)
		return errors.As(callErr, &died)
	})
	if !strings.Contains(died.Error(), "placement group "+pg.ID()[:8]) {
		t.Errorf("actor error %q does not say its placement group was removed", died)
	}
	if !errors.Is(callErr, ray.ErrPlacementGroupRemoved) {
		t.Errorf("actor error %v does not match ErrPlacementGroupRemoved", callErr)
	}
	_, err = PGTask.Options(ray.InPlacementGroup(pg, 0)).Remote(ctx, ray.V(0)).Get(ctx)
	var removed *ray.PlacementGroupRemovedError
	if !errors.As(err, &removed) || !errors.Is(err, ray.ErrPlacementGroupRemoved) {
		t.Errorf("task in a removed group: %v, want *PlacementGroupRemovedError", err)
	}
	waitResourcesFree(t, ctx)
}

func TestPlacementGroupCaptureChildTasks(t *testing.T) {
	ctx := testCtx(t)
	// One of the node's 2 CPUs is the group's, one stays free for children
	// outside it.
	pg := createPG(t, ctx, []ray.Bundle{{"CPU": 1}}, ray.Pack)
	if err := pg.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	// The parents hold no CPU, so a child (1 CPU) fits the bundle or the
	// node.
	in := []ray.Option{ray.InPlacementGroup(pg, 0), ray.CPUs(0)}
	for _, tt := range []struct {
		name    string
		opts    []ray.Option
		child   string // the child's own strategy: "", "spread" or "default"
		inGroup bool
	}{
		{"captured", append(in, ray.CaptureChildTasks()), "", true},
		{"not captured", in, "", false},
		{"child chooses Spread", append(in, ray.CaptureChildTasks()), "spread", false},
		// Ray's scheduling_strategy="DEFAULT" (or placement_group=None)
		// opts a child out of its parent's capturing group.
		{"child chooses DefaultScheduling", append(in, ray.CaptureChildTasks()), "default", false},
	} {
		tc, err := PGParent.Options(tt.opts...).Remote(ctx, ray.V(tt.child)).Get(ctx)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := tc.PlacementGroupID == pg.ID(); got != tt.inGroup {
			t.Errorf("%s: child %+v in the group = %v, want %v", tt.name, tc, got, tt.inGroup)
		}
		if tt.inGroup && (tc.Bundle != ray.AnyBundle || !tc.CaptureChildTasks) {
			t.Errorf("%s: child %+v, want any bundle of the group, capturing", tt.name, tc)
		}
	}

	// An actor's methods capture too.
	h := PGActorA.Options(ray.InPlacementGroup(pg, 0), ray.CaptureChildTasks()).Remote(ctx, ray.V(0))
	if tc, err := PGChild.On(h).Remote(ctx).Get(ctx); err != nil || tc.PlacementGroupID != pg.ID() {
		t.Errorf("actor's child %+v, %v; want it in group %s", tc, err, pg.ID())
	}
}
