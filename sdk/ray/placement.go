package ray

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/sdk/ray/internal/core"
)

// Bundle is one resource shape of a placement group: {"CPU": 2, "GPU": 1}.
type Bundle map[string]float64

// String writes the bundle as {CPU: 2, GPU: 1}, names sorted.
func (b Bundle) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(b)) {
		parts = append(parts, fmt.Sprintf("%s: %g", k, b[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// PlacementStrategy says how a placement group's bundles are spread over
// nodes.
type PlacementStrategy string

// The placement strategies, as Ray's.
const (
	// Pack puts the bundles on as few nodes as possible (best effort).
	Pack PlacementStrategy = "PACK"
	// SpreadBundles puts the bundles on as many distinct nodes as possible
	// (best effort). (Ray calls it "SPREAD"; Spread is the task option.)
	SpreadBundles PlacementStrategy = "SPREAD"
	// StrictPack puts every bundle on one node, or waits until one can
	// hold them all.
	StrictPack PlacementStrategy = "STRICT_PACK"
	// StrictSpread puts every bundle on a distinct node, or waits until
	// there are enough.
	StrictSpread PlacementStrategy = "STRICT_SPREAD"
)

var strategyPB = map[PlacementStrategy]pb.PlacementStrategy{
	Pack:          pb.PlacementStrategy_PLACEMENT_STRATEGY_PACK,
	SpreadBundles: pb.PlacementStrategy_PLACEMENT_STRATEGY_SPREAD,
	StrictPack:    pb.PlacementStrategy_PLACEMENT_STRATEGY_STRICT_PACK,
	StrictSpread:  pb.PlacementStrategy_PLACEMENT_STRATEGY_STRICT_SPREAD,
}

func strategyFromPB(s pb.PlacementStrategy) PlacementStrategy {
	for k, v := range strategyPB {
		if v == s {
			return k
		}
	}
	return PlacementStrategy(s.String())
}

// AnyBundle places a task or actor in any bundle of its group.
const AnyBundle = core.AnyBundle

// PlacementGroup is a handle to a placement group: a set of bundles
// reserved together across the cluster. Create one with
// CreatePlacementGroup, find a named one with GetPlacementGroup, and place
// tasks and actors in it with InPlacementGroup.
type PlacementGroup struct {
	id       ids.ID
	name     string
	strategy PlacementStrategy
	bundles  []Bundle
	// watch starts, once, the watcher that closes ready when the group is
	// created or removed (readyChan).
	watch sync.Once
	ready chan struct{}
}

// readyChan makes a PlacementGroup a Waitable (Ray's pg.ready()): ready
// once it is created or removed. The first Wait on the group starts a
// watcher that lasts until then (or until the runtime shuts down), so a
// loop polling with Wait's timeout 0 sees the group ready soon after it
// is.
func (pg *PlacementGroup) readyChan(cw *core.CoreWorker, _ bool) (<-chan struct{}, string, error) {
	if pg == nil {
		return nil, "", errors.New("a nil PlacementGroup")
	}
	pg.watch.Do(func() {
		pg.ready = make(chan struct{})
		go func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				select {
				case <-cw.Closed():
					cancel()
				case <-ctx.Done():
				}
			}()
			if err := pg.Wait(ctx); ctx.Err() == nil || err == nil {
				close(pg.ready) // created, or removed (Wait says why)
			}
		}()
	})
	return pg.ready, "placement group " + pg.ID(), nil
}

// ID returns the group's id (hex).
func (pg *PlacementGroup) ID() string { return pg.id.String() }

// Name returns the group's name ("" for an anonymous group).
func (pg *PlacementGroup) Name() string { return pg.name }

// Strategy returns the group's strategy.
func (pg *PlacementGroup) Strategy() PlacementStrategy { return pg.strategy }

// Bundles returns a copy of the group's bundles.
func (pg *PlacementGroup) Bundles() []Bundle {
	out := make([]Bundle, len(pg.bundles))
	for i, b := range pg.bundles {
		out[i] = maps.Clone(b)
	}
	return out
}

// PlacementGroupOption configures CreatePlacementGroup.
type PlacementGroupOption func(*pgOptions)

type pgOptions struct {
	name     string
	detached bool
}

// GroupName names the group, so that any job of the creating job's
// namespace (Namespace) can find it with GetPlacementGroup while it
// exists. Names are unique per namespace, as Ray's are.
func GroupName(name string) PlacementGroupOption { return func(o *pgOptions) { o.name = name } }

// Detached makes the group outlive the job that created it (Ray's
// lifetime="detached"); remove it with RemovePlacementGroup. Other groups
// are removed when their job ends.
func Detached() PlacementGroupOption { return func(o *pgOptions) { o.detached = true } }

// CreatePlacementGroup asks for bundles to be reserved together with
// strategy and returns at once: the group is created (every bundle
// reserved, atomically across nodes) as soon as the cluster has room.
// Wait blocks until then. A group no node could ever hold is not an
// error: it waits, and `goray status` flags it infeasible. Bad bundles
// (empty, negative or unknown amounts) and a name another group holds are
// errors.
func CreatePlacementGroup(ctx context.Context, bundles []Bundle, strategy PlacementStrategy, opts ...PlacementGroupOption) (*PlacementGroup, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	var o pgOptions
	for _, opt := range opts {
		opt(&o)
	}
	st, ok := strategyPB[strategy]
	if !ok {
		return nil, fmt.Errorf("goray: CreatePlacementGroup: unknown strategy %q (want PACK, SPREAD, STRICT_PACK or STRICT_SPREAD)", strategy)
	}
	if len(bundles) == 0 {
		return nil, errors.New("goray: CreatePlacementGroup: no bundles")
	}
	pg := &PlacementGroup{id: ids.New(), name: o.name, strategy: strategy}
	info := &pb.PlacementGroupInfo{PlacementGroupId: pg.id.Bytes(), Name: o.name, JobId: cw.JobID().Bytes(), Detached: o.detached, Strategy: st}
	if o.name != "" {
		info.Namespace = cw.Namespace()
	}
	for i, b := range bundles {
		set, err := bundleSet(i, b)
		if err != nil {
			return nil, fmt.Errorf("goray: CreatePlacementGroup: %w", err)
		}
		pg.bundles = append(pg.bundles, maps.Clone(b))
		info.Bundles = append(info.Bundles, &pb.Bundle{Index: int32(i), Resources: &pb.Resources{Amounts: set}})
	}
	if _, err := cw.GCS().CreatePlacementGroup(ctx, &pb.CreatePlacementGroupRequest{Group: info}); err != nil {
		if status.Code(err) == codes.AlreadyExists {
			return nil, fmt.Errorf("goray: CreatePlacementGroup: %s: %w", status.Convert(err).Message(), ErrPlacementGroupNameTaken)
		}
		return nil, fmt.Errorf("goray: CreatePlacementGroup: %w", err)
	}
	return pg, nil
}

// bundleSet checks bundle i of a call (CreatePlacementGroup, the
// WithBundles of RequestResources) and returns it as a resource set:
// finite amounts >= 0, some resource asked for, valid names, no placement
// group resources. Its errors name the bundle by index.
func bundleSet(i int, b Bundle) (resources.Set, error) {
	set, err := resources.FromFloats(b)
	if err != nil {
		return nil, fmt.Errorf("bundle %d %s: %w", i, b, err)
	}
	if len(set) == 0 {
		return nil, fmt.Errorf("bundle %d is empty; a bundle asks for some resource", i)
	}
	for name := range set {
		if err := resources.CheckName(name); err != nil {
			return nil, fmt.Errorf("bundle %d: %w", i, err)
		}
		if resources.IsGroupName(name) {
			return nil, fmt.Errorf("bundle %d: %q is a placement group resource; a bundle asks for node resources", i, name)
		}
	}
	return set, nil
}

// ErrPlacementGroupNameTaken matches CreatePlacementGroup with a name
// another group (not removed) holds.
var ErrPlacementGroupNameTaken = errors.New("placement group name taken")

// ErrPlacementGroupNotFound matches GetPlacementGroup of a name no group
// holds (a removed group's name is free).
var ErrPlacementGroupNotFound = errors.New("placement group not found")

// Wait blocks until every bundle of the group is reserved, and returns
// nil, or until ctx ends (its error), or the group is removed
// (*PlacementGroupRemovedError).
func (pg *PlacementGroup) Wait(ctx context.Context) error {
	cw, err := current()
	if err != nil {
		return err
	}
	for {
		rep, err := cw.GCS().GetPlacementGroup(ctx, &pb.GetPlacementGroupRequest{PlacementGroupId: pg.id.Bytes(), WaitReady: true})
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("goray: waiting for placement group %s: %w", pg.id.Short(), ctx.Err())
			}
			if status.Code(err) == codes.DeadlineExceeded || status.Code(err) == codes.Canceled {
				continue
			}
			return fmt.Errorf("goray: waiting for placement group %s: %w", pg.id.Short(), err)
		}
		switch g := rep.GetGroup(); g.GetState() {
		case pb.PlacementGroupState_PLACEMENT_GROUP_STATE_CREATED:
			return nil
		case pb.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED:
			return &PlacementGroupRemovedError{Reason: "goray: placement group " + pg.id.Short() + " was removed (" + g.GetRemovalReason() + ")"}
		}
	}
}

// WaitTimeout is Wait bounded by d: it reports whether the group was ready
// within d (Ray's pg.wait(timeout_seconds)); d <= 0 checks once.
func (pg *PlacementGroup) WaitTimeout(ctx context.Context, d time.Duration) (bool, error) {
	if d <= 0 {
		info, err := pg.Info(ctx)
		if err == nil && info.State == "REMOVED" {
			err = &PlacementGroupRemovedError{Reason: "goray: placement group " + pg.id.Short() + " was removed (" + info.RemovalReason + ")"}
		}
		return err == nil && info.State == "CREATED", err
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := pg.Wait(wctx)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return false, nil
	}
	return err == nil, err
}

// Info returns the group's current state as the GCS has it.
func (pg *PlacementGroup) Info(ctx context.Context) (PlacementGroupInfo, error) {
	cw, err := current()
	if err != nil {
		return PlacementGroupInfo{}, err
	}
	rep, err := cw.GCS().GetPlacementGroup(ctx, &pb.GetPlacementGroupRequest{PlacementGroupId: pg.id.Bytes()})
	if err != nil {
		return PlacementGroupInfo{}, fmt.Errorf("goray: placement group %s: %w", pg.id.Short(), err)
	}
	return groupInfo(rep.GetGroup()), nil
}

// RemovePlacementGroup removes the group: every bundle is given back, its
// actors are killed and the tasks running in it end; their callers get a
// *PlacementGroupRemovedError (or an *ActorDiedError). Removing a removed
// group does nothing.
func RemovePlacementGroup(ctx context.Context, pg *PlacementGroup) error {
	cw, err := current()
	if err != nil {
		return err
	}
	if _, err := cw.GCS().RemovePlacementGroup(ctx, &pb.RemovePlacementGroupRequest{PlacementGroupId: pg.id.Bytes()}); err != nil {
		return fmt.Errorf("goray: removing placement group %s: %w", pg.id.Short(), err)
	}
	return nil
}

// GetPlacementGroup finds a group named in the job's namespace, from any
// job of the namespace (Ray's get_placement_group), as long as it is not
// removed.
func GetPlacementGroup(ctx context.Context, name string) (*PlacementGroup, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	rep, err := cw.GCS().GetPlacementGroup(ctx, &pb.GetPlacementGroupRequest{Name: name, Namespace: cw.Namespace()})
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("goray: no placement group named %q in namespace %q: %w", name, cw.Namespace(), ErrPlacementGroupNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("goray: placement group %q: %w", name, err)
	}
	g := rep.GetGroup()
	pg := &PlacementGroup{id: ids.MustFromBytes(g.GetPlacementGroupId()), name: g.GetName(), strategy: strategyFromPB(g.GetStrategy())}
	for _, b := range g.GetBundles() {
		pg.bundles = append(pg.bundles, Bundle(resources.Set(b.GetResources().GetAmounts()).Floats()))
	}
	return pg, nil
}

// PlacementGroupInfo is a placement group as the GCS has it (Ray's
// placement_group_table entry).
type PlacementGroupInfo struct {
	ID   string
	Name string
	// Namespace is a named group's namespace.
	Namespace string
	JobID     string
	Detached  bool
	Strategy  PlacementStrategy
	// State is PENDING, PREPARED, CREATED, REMOVED or RESCHEDULING.
	State string
	// Bundles and the nodes (hex ids) holding them ("" while not placed).
	Bundles     []Bundle
	BundleNodes []string
	// PendingReason says why a PENDING or RESCHEDULING group waits;
	// Infeasible marks one no node of the cluster could ever hold.
	PendingReason string
	Infeasible    bool
	RemovalReason string
	Reschedules   int
}

func groupInfo(g *pb.PlacementGroupInfo) PlacementGroupInfo {
	out := PlacementGroupInfo{
		ID: ids.MustFromBytes(g.GetPlacementGroupId()).String(), Name: g.GetName(), Namespace: g.GetNamespace(), Detached: g.GetDetached(),
		Strategy: strategyFromPB(g.GetStrategy()), State: strings.TrimPrefix(g.GetState().String(), "PLACEMENT_GROUP_STATE_"),
		PendingReason: g.GetPendingReason(), Infeasible: g.GetInfeasible(), RemovalReason: g.GetRemovalReason(), Reschedules: int(g.GetReschedules()),
	}
	if len(g.GetJobId()) == ids.Size {
		out.JobID = ids.MustFromBytes(g.GetJobId()).String()
	}
	for _, b := range g.GetBundles() {
		out.Bundles = append(out.Bundles, Bundle(resources.Set(b.GetResources().GetAmounts()).Floats()))
		node := ""
		if len(b.GetNodeId()) == ids.Size {
			node = ids.MustFromBytes(b.GetNodeId()).String()
		}
		out.BundleNodes = append(out.BundleNodes, node)
	}
	return out
}

// PlacementGroups lists every placement group of the cluster, removed ones
// too, in creation order (Ray's placement_group_table).
func PlacementGroups(ctx context.Context) ([]PlacementGroupInfo, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	rep, err := cw.GCS().ListPlacementGroups(ctx, &pb.ListPlacementGroupsRequest{})
	if err != nil {
		return nil, fmt.Errorf("goray: listing placement groups: %w", err)
	}
	out := make([]PlacementGroupInfo, 0, len(rep.GetGroups()))
	for _, g := range rep.GetGroups() {
		out = append(out, groupInfo(g))
	}
	return out, nil
}

// InPlacementGroup places a task or actor in bundle of pg (AnyBundle: any
// of its bundles), as Ray's PlacementGroupSchedulingStrategy. The call's
// resources come out of the bundle's: a call asking for more than its
// bundle holds (than every bundle, with AnyBundle) fails at submit with a
// *BundleTooSmallError. Calls wait while the group is not created yet.
func InPlacementGroup(pg *PlacementGroup, bundle int) Option {
	return func(c *callOptions) {
		c.pg, c.pgBundle = pg, bundle
		c.strategy, c.affinity, c.soft = core.StrategyDefault, "", false
	}
}

// CaptureChildTasks makes the tasks and actors a call submits (and theirs)
// land in the call's placement group too, unless they choose a placement
// of their own (Ray's placement_group_capture_child_tasks).
func CaptureChildTasks() Option { return func(c *callOptions) { c.pgCapture = true } }

// BundleTooSmallError says a call placed in a placement group asks for
// more than its bundle holds.
type BundleTooSmallError struct {
	// Function is the call's registered name.
	Function string
	// Group is the group's id (hex); Bundle the index asked for (AnyBundle
	// when none of the bundles fits).
	Group  string
	Bundle int
	// Has is the bundle's shape (the largest for AnyBundle); Want what the
	// call asks for.
	Has, Want Bundle
}

func (e *BundleTooSmallError) Error() string {
	which := fmt.Sprintf("bundle %d", e.Bundle)
	if e.Bundle == AnyBundle {
		which = "any bundle"
	}
	return fmt.Sprintf("goray: %s asks for %s but %s of placement group %s holds %s", e.Function, e.Want, which, short(e.Group), e.Has)
}

func short(hex string) string {
	if len(hex) > 8 {
		return hex[:8]
	}
	return hex
}

// placement checks the call's request against its bundle and returns the
// core placement.
func (c callOptions) placement(function string, req resources.Set) (*core.Placement, error) {
	if c.pg == nil {
		return nil, nil
	}
	n := len(c.pg.bundles)
	if c.pgBundle != AnyBundle && (c.pgBundle < 0 || c.pgBundle >= n) {
		return nil, fmt.Errorf("goray: %s: InPlacementGroup bundle index %d out of range: placement group %s has %d bundles (0 to %d, or AnyBundle)",
			function, c.pgBundle, c.pg.id.Short(), n, n-1)
	}
	fits := func(i int) bool {
		set, err := resources.FromFloats(c.pg.bundles[i])
		return err == nil && set.Fits(req)
	}
	want := Bundle(req.Floats())
	if c.pgBundle == AnyBundle {
		for i := range c.pg.bundles {
			if fits(i) {
				return &core.Placement{Group: c.pg.id, Bundle: AnyBundle, CaptureChildTasks: c.pgCapture}, nil
			}
		}
		return nil, &BundleTooSmallError{Function: function, Group: c.pg.ID(), Bundle: AnyBundle, Has: c.pg.bundles[largest(c.pg.bundles)], Want: want}
	}
	if !fits(c.pgBundle) {
		return nil, &BundleTooSmallError{Function: function, Group: c.pg.ID(), Bundle: c.pgBundle, Has: maps.Clone(c.pg.bundles[c.pgBundle]), Want: want}
	}
	return &core.Placement{Group: c.pg.id, Bundle: c.pgBundle, CaptureChildTasks: c.pgCapture}, nil
}

// largest is the index of the bundle with the most of everything summed.
func largest(bs []Bundle) int {
	best, bestSum := 0, -1.0
	for i, b := range bs {
		sum := 0.0
		for _, v := range b {
			sum += v
		}
		if sum > bestSum {
			best, bestSum = i, sum
		}
	}
	return best
}
