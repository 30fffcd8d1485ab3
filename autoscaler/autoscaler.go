// Package autoscaler grows and shrinks a goray cluster with its demand, as
// Ray's autoscaler (v2) does: every Interval it reads the cluster's load
// from the GCS (work queued on the raylets that no node can start, pending
// placement groups, explicit requests made with ray.RequestResources) and
// the instances the provider plugin lists, and reconciles them:
//
//   - each instance moves through the state machine of
//     autoscaler/internal/instance (requested, allocated, installing,
//     running, draining, terminating, terminated, and the failure states),
//     matched to its node by the label provider.LabelInstanceID;
//   - demand is bin-packed (autoscaler/internal/binpack) onto the free
//     capacity of running and pending nodes, and what is left onto new
//     nodes of the types that fit it best, within each type's max_workers,
//     the cluster's max_workers and upscaling_speed; a shape no node type
//     can hold is reported infeasible and launches nothing;
//   - every node type's min_workers is kept;
//   - a worker node with nothing leased or queued for idle_timeout is
//     drained (the GCS's DrainNode: no new work, its primary copies of
//     objects spilled to shared storage) and terminated once drained,
//     never below min_workers nor while a standing request needs it; a
//     node that refuses the drain (it holds objects it has nowhere to
//     move) stays;
//   - launch failures (reported by the provider, or an instance that never
//     joins) are recorded and back off per node type.
//
// The autoscaler runs on the head, in the node host, as its own component
// with its own goroutine and lock; it reaches the GCS and the provider
// over gRPC only. Its state can always be rebuilt from the provider's list
// (a restarted autoscaler adopts the running instances), and it publishes
// what it sees to the GCS's KV store (namespace StatusNamespace), where
// `goray status` reads it.
package autoscaler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/autoscaler/internal/binpack"
	"github.com/goray-dev/goray/autoscaler/internal/instance"
	"github.com/goray-dev/goray/autoscaler/request"
	"github.com/goray-dev/goray/config"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/sdk/provider"
)

// KV keys of the autoscaler in the GCS (namespace StatusNamespace).
const (
	// StatusNamespace is the GCS KV namespace of the autoscaler.
	StatusNamespace = request.Namespace
	// StatusKey holds the latest Status as JSON.
	StatusKey = "status"
	// RequestsKey holds the explicit resource requests (ray.RequestResources)
	// as a JSON array of Request.
	RequestsKey = request.Key
)

// DefaultInterval is how often the autoscaler reconciles.
const DefaultInterval = 5 * time.Second

// maxFailures bounds the failures Status keeps.
const maxFailures = 20

// Request is one shape of an explicit resource request (package request,
// which programs import without the autoscaler).
type Request = request.Request

// Config configures an Autoscaler.
type Config struct {
	// Cluster is the cluster file: node types, limits, idle timeout.
	Cluster *config.Cluster
	// Provider launches and terminates instances.
	Provider provider.Provider
	// NodeConfigs are the node types' node_config blocks decoded to JSON
	// (provider.LaunchRequest.NodeConfig), by type name.
	NodeConfigs map[string][]byte
	// GCS is the cluster's GCS.
	GCS pb.GcsClient
	// HeadAddress is the GCS address new nodes join.
	HeadAddress string
	// AuthToken is the cluster token new nodes use (sensitive).
	AuthToken string
	// Interval between reconciliations (default DefaultInterval).
	Interval time.Duration
	// Timeouts of the instance state machine (zero: its defaults; the
	// install timeout's is the cluster file's install_timeout).
	Timeouts instance.Timeouts
	// DrainTimeout bounds a drain (zero: DefaultDrainTimeout).
	DrainTimeout time.Duration
	// Backoff after launch failures: initial and maximum delay (zero:
	// 10 s and 5 min).
	BackoffInitial, BackoffMax time.Duration
	// Logger receives the autoscaler's log.
	Logger hclog.Logger
	// Now returns the time (tests); nil is time.Now.
	Now func() time.Time
}

// Autoscaler is the cluster's autoscaler. Run runs it; Reconcile runs
// one round (tests).
type Autoscaler struct {
	cfg     Config
	log     hclog.Logger
	now     func() time.Time
	backoff *instance.Backoff

	mu        sync.Mutex
	insts     map[string]*tracked  // by provider instance id
	launches  map[string]*launch   // launch requests not yet fully listed, by request id
	idleSince map[string]time.Time // by node id
	failures  []Failure            // newest last
	status    Status               // of the last round
	adopted   bool                 // the first round adopted the provider's instances
}

// tracked is one instance the provider lists.
type tracked struct {
	inst *instance.Instance
	// address is the instance's IP; node the node that joined from it.
	address string
	node    *pb.NodeView
	// detail is the last drain's progress or why the node was kept.
	detail string
	// terminateSent says the provider was asked to terminate it.
	terminateSent bool
}

// launch is a launch request sent to the provider.
type launch struct {
	nodeType string
	count    int
	sent     time.Time
	listed   map[string]bool // instance ids seen with this request id
	req      *provider.LaunchRequest
	// accepted says the provider answered the request; until then it is
	// sent again every round with the same id (the provider launches
	// nothing twice for one id).
	accepted bool
	// failedOnce says a failed send was recorded.
	failedOnce bool
}

// New returns an autoscaler; Run starts it.
func New(cfg Config) (*Autoscaler, error) {
	if cfg.Cluster == nil || cfg.Provider == nil || cfg.GCS == nil {
		return nil, errors.New("autoscaler: Cluster, Provider and GCS are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeouts.InstallTimeout <= 0 {
		cfg.Timeouts.InstallTimeout = cfg.Cluster.InstallTimeout // install_timeout
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Autoscaler{
		cfg: cfg, log: cfg.Logger, now: cfg.Now,
		backoff: instance.NewBackoff(cfg.BackoffInitial, cfg.BackoffMax),
		insts:   map[string]*tracked{}, launches: map[string]*launch{}, idleSince: map[string]time.Time{},
	}, nil
}

// Run reconciles every Interval until ctx ends. A failed round is logged
// and tried again at the next tick.
func (a *Autoscaler) Run(ctx context.Context) error {
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, max(a.cfg.Interval, 10*time.Second))
		if err := a.Reconcile(rctx); err != nil && ctx.Err() == nil {
			a.log.Warn("autoscaler round failed; trying again", "error", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Status returns what the last round saw and did.
func (a *Autoscaler) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

// load is what one round reads.
type load struct {
	nodes     []*pb.NodeView
	groups    []*pb.PlacementGroupInfo
	requests  []Request
	instances []provider.Instance
	errors    []provider.LaunchError
}

func (a *Autoscaler) read(ctx context.Context) (*load, error) {
	c := a.cfg.Cluster
	l := &load{}
	nodes, err := a.cfg.GCS.GetAllNodes(ctx, &pb.GetAllNodesRequest{})
	if err != nil {
		return nil, fmt.Errorf("autoscaler: reading the nodes from the GCS: %w", err)
	}
	l.nodes = nodes.GetNodes()
	groups, err := a.cfg.GCS.ListPlacementGroups(ctx, &pb.ListPlacementGroupsRequest{})
	if err != nil {
		return nil, fmt.Errorf("autoscaler: reading the placement groups from the GCS: %w", err)
	}
	l.groups = groups.GetGroups()
	if kv, err := a.cfg.GCS.KVGet(ctx, &pb.KVGetRequest{Ns: StatusNamespace, Key: RequestsKey}); err == nil && len(kv.GetValue()) > 0 {
		if err := json.Unmarshal(kv.GetValue(), &l.requests); err != nil {
			a.log.Warn("ignoring malformed resource requests", "error", err)
		}
	}
	list, err := a.cfg.Provider.List(ctx, &provider.ListRequest{ClusterName: c.Name})
	if err != nil {
		return nil, fmt.Errorf("autoscaler: listing the instances of cluster %q: %w", c.Name, err)
	}
	l.instances = list.Instances
	errs, err := a.cfg.Provider.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: c.Name})
	if err != nil {
		return nil, fmt.Errorf("autoscaler: polling the provider's errors: %w", err)
	}
	l.errors = errs.Errors
	return l, nil
}

// Reconcile runs one round: read, update the instances, launch for unmet
// demand, terminate idle nodes, publish the status.
func (a *Autoscaler) Reconcile(ctx context.Context) error {
	l, err := a.read(ctx)
	if err != nil {
		a.publishError(ctx, err)
		return err
	}
	now := a.now()
	a.mu.Lock()
	a.observe(l, now)
	plan, demands := a.plan(l, now)
	idle := a.idleInstances(l, now)
	a.mu.Unlock()

	a.mu.Lock()
	var resend []string
	for id, lr := range a.launches {
		if !lr.accepted {
			resend = append(resend, id)
		}
	}
	a.mu.Unlock()
	sort.Strings(resend)
	for _, id := range resend {
		a.send(ctx, id, now)
	}
	for _, nt := range sortedKeys(plan.Launch) {
		a.launch(ctx, nt, plan.Launch[nt], now)
	}
	if done := a.drain(ctx, idle, now); len(done) > 0 {
		a.terminate(ctx, done, "idle for "+a.cfg.Cluster.IdleTimeout.String()+" and drained", now)
	}
	a.mu.Lock()
	var failed, dead []string
	for id, t := range a.insts {
		switch s := t.inst.State(); {
		case s.Failed():
			failed = append(failed, id)
		case s == instance.Terminating && !t.terminateSent: // its node died
			dead = append(dead, id)
		}
	}
	a.mu.Unlock()
	sort.Strings(failed)
	sort.Strings(dead)
	if len(failed) > 0 {
		a.terminate(ctx, failed, "failed", now)
	}
	if len(dead) > 0 {
		a.terminate(ctx, dead, "its node died", now)
	}
	return a.publish(ctx, l, plan, demands, now)
}

// observe updates the instances from the provider's list, its errors and
// the GCS's nodes; a.mu is held.
func (a *Autoscaler) observe(l *load, now time.Time) {
	byInst := map[string]*pb.NodeView{}
	for _, n := range l.nodes {
		if id := n.GetInfo().GetLabels()[provider.LabelInstanceID]; id != "" {
			// An alive node wins over a dead one of the same instance.
			if old := byInst[id]; old == nil || n.GetInfo().GetState() == "ALIVE" {
				byInst[id] = n
			}
		}
	}
	seen := map[string]bool{}
	for _, pi := range l.instances {
		seen[pi.ID] = true
		t := a.insts[pi.ID]
		if t == nil {
			inst, err := instance.Adopt(pi.ID, pi.NodeType, instance.ProviderState(pi.State), now)
			if err != nil {
				a.log.Warn("cannot adopt instance", "instance", pi.ID, "error", err)
				continue
			}
			inst.RequestID, inst.ProviderID, inst.Timeouts = pi.RequestID, pi.ID, a.cfg.Timeouts
			t = &tracked{inst: inst}
			a.insts[pi.ID] = t
			if _, ours := a.launches[pi.RequestID]; !ours && !a.adopted {
				a.log.Info("adopted a running instance", "instance", pi.ID, "node_type", pi.NodeType, "state", pi.State)
			}
		}
		t.address = pi.Address
		a.apply(t, instance.Event{Kind: instance.ProviderListed, Listed: instance.ProviderState(pi.State)}, now)
		if lr := a.launches[pi.RequestID]; lr != nil {
			lr.listed[pi.ID] = true
		}
		if n := byInst[pi.ID]; n != nil {
			t.node = n
			t.inst.NodeID = hex.EncodeToString(n.GetInfo().GetNodeId())
			if n.GetInfo().GetState() == "ALIVE" {
				if t.inst.State() != instance.Running {
					a.backoff.Succeeded(pi.NodeType)
				}
				a.apply(t, instance.Event{Kind: instance.NodeJoined}, now)
			} else {
				a.apply(t, instance.Event{Kind: instance.NodeDead, Reason: n.GetInfo().GetDeathReason()}, now)
			}
		}
	}
	a.adopted = true
	for id, t := range a.insts {
		if !seen[id] {
			a.apply(t, instance.Event{Kind: instance.ProviderGone}, now)
			if t.inst.State() == instance.Terminated {
				delete(a.insts, id)
			}
		}
	}
	for _, e := range l.errors {
		a.recordFailure(e.NodeType, fmt.Sprintf("%s failed: %s", e.Op, e.Message), e.At)
		if e.Op == provider.ErrorOpLaunch {
			a.backoff.Failed(e.NodeType, now)
			// The failed part of the launch is not coming; the rest may.
			if lr := a.launches[e.RequestID]; lr != nil {
				lr.count -= max(e.Count, 1)
				if lr.count <= len(lr.listed) {
					delete(a.launches, e.RequestID)
				}
			}
		}
		if t := a.insts[e.InstanceID]; t != nil {
			a.apply(t, instance.Event{Kind: instance.Error, Reason: e.Message}, now)
		}
	}
	for id, lr := range a.launches {
		if len(lr.listed) >= lr.count {
			delete(a.launches, id)
			continue
		}
		if timeout := a.allocateTimeout(); now.Sub(lr.sent) > timeout {
			a.recordFailure(lr.nodeType, fmt.Sprintf("launch %s: %d of %d instances never appeared within %s", id, lr.count-len(lr.listed), lr.count, timeout), now)
			a.backoff.Failed(lr.nodeType, now)
			delete(a.launches, id)
		}
	}
	for _, t := range a.insts {
		before := t.inst.State()
		a.apply(t, instance.Event{Kind: instance.Tick}, now)
		switch after := t.inst.State(); {
		case after == before:
		case after == instance.AllocationFailed || after == instance.InstallFailed:
			a.recordFailure(t.inst.NodeType, fmt.Sprintf("instance %s: %s (it never joined the cluster)", t.inst.ID, after), now)
			a.backoff.Failed(t.inst.NodeType, now)
		case after == instance.TerminationFailed:
			a.recordFailure(t.inst.NodeType, fmt.Sprintf("instance %s: %s (the provider still lists it; terminating it again)", t.inst.ID, after), now)
		}
	}
}

func (a *Autoscaler) allocateTimeout() time.Duration {
	if a.cfg.Timeouts.AllocateTimeout > 0 {
		return a.cfg.Timeouts.AllocateTimeout
	}
	return 10 * time.Minute
}

// apply applies ev, logging a refused transition (the provider and the
// GCS may disagree for a moment).
func (a *Autoscaler) apply(t *tracked, ev instance.Event, now time.Time) {
	before := t.inst.State()
	if err := t.inst.Apply(ev, now); err != nil {
		a.log.Debug("instance event ignored", "error", err)
		return
	}
	if after := t.inst.State(); after != before {
		a.log.Info("instance state", "instance", t.inst.ID, "node_type", t.inst.NodeType, "from", before.String(), "to", after.String())
	}
}

func (a *Autoscaler) recordFailure(nodeType, msg string, at time.Time) {
	if at.IsZero() {
		at = a.now()
	}
	msg = provider.RedactToken(msg, a.cfg.AuthToken)
	a.log.Warn("autoscaler failure", "node_type", nodeType, "error", msg)
	a.failures = append(a.failures, Failure{NodeType: nodeType, Message: msg, At: at})
	if len(a.failures) > maxFailures {
		a.failures = a.failures[len(a.failures)-maxFailures:]
	}
}

// counts returns how many instances of each worker type exist or are
// being launched (not terminating), and how many are pending.
func (a *Autoscaler) counts() (total, pending map[string]int) {
	total, pending = map[string]int{}, map[string]int{}
	for _, t := range a.insts {
		switch s := t.inst.State(); {
		case s == instance.Terminating || s == instance.Terminated || s.Failed():
		case s == instance.Running || s == instance.Draining:
			total[t.inst.NodeType]++
		default:
			total[t.inst.NodeType]++
			pending[t.inst.NodeType]++
		}
	}
	for _, lr := range a.launches {
		n := lr.count - len(lr.listed)
		total[lr.nodeType] += n
		pending[lr.nodeType] += n
	}
	return total, pending
}

// plan bin-packs the round's demand; a.mu is held.
func (a *Autoscaler) plan(l *load, now time.Time) (binpack.Result, []Demand) {
	c := a.cfg.Cluster
	total, pending := a.counts()
	// Instances on their way out still run (and cost) until the provider
	// no longer lists them: they count toward max_workers, not capacity.
	for _, t := range a.insts {
		if s := t.inst.State(); s == instance.Terminating || s.Failed() {
			total[t.inst.NodeType]++
		}
	}
	workers, pendingAll := 0, 0
	for _, n := range total {
		workers += n
	}
	for _, n := range pending {
		pendingAll += n
	}
	var types []binpack.NodeType
	for _, nt := range c.NodeTypes {
		if nt.Name == c.HeadNodeType {
			continue
		}
		room := nt.MaxWorkers - total[nt.Name]
		if !a.backoff.Allow(nt.Name, now) {
			room = 0
		}
		set, err := resources.FromFloats(nt.Resources)
		if err != nil {
			continue
		}
		types = append(types, binpack.NodeType{Name: nt.Name, Resources: set, Max: room})
	}
	// Capacity: running nodes' free resources, pending instances' totals.
	var nodes []binpack.Node
	for _, n := range l.nodes {
		if n.GetInfo().GetState() != "ALIVE" || n.GetDraining() { // a draining node takes no work
			continue
		}
		nodes = append(nodes, binpack.Node{ID: hex.EncodeToString(n.GetInfo().GetNodeId()), Available: plain(n.GetAvailable().GetAmounts())})
	}
	for _, t := range a.insts {
		if s := t.inst.State(); s.Pending() || (s == instance.Requested) {
			if nt, ok := c.NodeType(t.inst.NodeType); ok {
				set, _ := resources.FromFloats(nt.Resources)
				nodes = append(nodes, binpack.Node{ID: t.inst.ID, Type: nt.Name, Available: set})
			}
		}
	}
	for id, lr := range a.launches {
		if nt, ok := c.NodeType(lr.nodeType); ok {
			set, _ := resources.FromFloats(nt.Resources)
			for i := len(lr.listed); i < lr.count; i++ {
				nodes = append(nodes, binpack.Node{ID: fmt.Sprintf("%s/%d", id, i), Type: nt.Name, Available: set.Clone()})
			}
		}
	}
	// Demand: work queued on the raylets, pending groups, explicit
	// requests.
	merged := map[string]*binpack.Demand{}
	var order []string
	add := func(shape resources.Set, count int) {
		if len(shape) == 0 || count <= 0 {
			return
		}
		k := shape.Key()
		if d := merged[k]; d != nil {
			d.Count += count
			return
		}
		merged[k] = &binpack.Demand{Shape: shape, Count: count}
		order = append(order, k)
	}
	for _, n := range l.nodes {
		if n.GetInfo().GetState() != "ALIVE" {
			continue
		}
		for _, p := range n.GetPending() {
			shape := resources.Set(p.GetResources().GetAmounts())
			if hasGroup(shape) { // waits on a placement group's bundle, not on nodes
				continue
			}
			add(shape.Clone(), int(p.GetCount()))
		}
	}
	var groups []binpack.Group
	for _, g := range l.groups {
		if g.GetState() != pb.PlacementGroupState_PLACEMENT_GROUP_STATE_PENDING && g.GetState() != pb.PlacementGroupState_PLACEMENT_GROUP_STATE_RESCHEDULING {
			continue
		}
		var bundles []resources.Set
		for _, b := range g.GetBundles() {
			if len(b.GetNodeId()) == 0 { // not placed yet
				bundles = append(bundles, resources.Set(b.GetResources().GetAmounts()).Clone())
			}
		}
		groups = append(groups, binpack.Group{Bundles: bundles, Strategy: strategyName(g.GetStrategy())})
	}
	var demands []binpack.Demand
	for _, k := range order {
		demands = append(demands, *merged[k])
	}
	// Global caps: max_workers, and upscaling_speed (at most that many
	// pending per running worker, but at least a few).
	maxLaunch := c.MaxWorkers - workers
	running := workers - pendingAll
	speedCap := max(5, int(math.Ceil(c.UpscalingSpeed*float64(running)))) - pendingAll
	maxLaunch = min(maxLaunch, speedCap)
	// Explicit requests (ray.RequestResources) ask for room in total,
	// whether or not work uses it: they are packed onto every node's
	// totals first, and what does not fit launches nodes. The work is
	// then packed onto free capacity, with those new nodes as pending.
	reqs := requestDemands(l.requests)
	reqRes := binpack.Plan(binpack.Input{Types: types, Nodes: a.totals(l), Demands: reqs, MaxLaunch: maxLaunch})
	for i := range types {
		types[i].Max -= reqRes.Launch[types[i].Name]
	}
	for _, t := range sortedKeys(reqRes.Launch) {
		nt, _ := c.NodeType(t)
		set, _ := resources.FromFloats(nt.Resources)
		for i := 0; i < reqRes.Launch[t]; i++ {
			nodes = append(nodes, binpack.Node{ID: fmt.Sprintf("~request/%s/%d", t, i), Type: t, Available: set.Clone()})
		}
	}
	res := binpack.Plan(binpack.Input{Types: types, Nodes: nodes, Demands: demands, Groups: groups, MaxLaunch: maxLaunch - sum(reqRes.Launch)})
	for t, n := range reqRes.Launch {
		res.Launch[t] += n
	}
	// min_workers come first, within max_workers.
	for _, nt := range c.NodeTypes {
		if nt.Name == c.HeadNodeType {
			continue
		}
		if short := nt.MinWorkers - total[nt.Name] - res.Launch[nt.Name]; short > 0 && a.backoff.Allow(nt.Name, now) {
			short = min(short, c.MaxWorkers-workers-sum(res.Launch))
			if short > 0 {
				res.Launch[nt.Name] += short
			}
		}
	}
	var out []Demand
	infeasible := map[string]bool{}
	for _, s := range res.Infeasible {
		infeasible[s.Key()] = true
	}
	for _, d := range demands {
		out = append(out, Demand{Resources: d.Shape.Floats(), Count: d.Count, Infeasible: infeasible[d.Shape.Key()]})
	}
	reqInfeasible := map[string]bool{}
	for _, s := range reqRes.Infeasible {
		reqInfeasible[s.Key()] = true
	}
	for _, d := range reqs {
		out = append(out, Demand{Resources: d.Shape.Floats(), Count: d.Count, Infeasible: reqInfeasible[d.Shape.Key()], Request: true})
	}
	for i, g := range groups {
		var shapes []map[string]float64
		for _, b := range g.Bundles {
			shapes = append(shapes, b.Floats())
		}
		out = append(out, Demand{Bundles: shapes, Strategy: g.Strategy, Count: 1, Infeasible: slices.Contains(res.InfeasibleGroups, i)})
	}
	return res, out
}

// requestDemands merges the explicit requests by shape.
func requestDemands(reqs []Request) []binpack.Demand {
	var out []binpack.Demand
	idx := map[string]int{}
	for _, r := range reqs {
		set, err := resources.FromFloats(r.Resources)
		if err != nil || len(set) == 0 || r.Count <= 0 {
			continue
		}
		if i, ok := idx[set.Key()]; ok {
			out[i].Count += r.Count
			continue
		}
		idx[set.Key()] = len(out)
		out = append(out, binpack.Demand{Shape: set, Count: r.Count})
	}
	return out
}

// totals returns every alive node's total resources and every pending
// instance's and launch's type totals, as binpack nodes; a.mu is held.
func (a *Autoscaler) totals(l *load) []binpack.Node {
	c := a.cfg.Cluster
	var nodes []binpack.Node
	for _, n := range l.nodes {
		if n.GetInfo().GetState() != "ALIVE" || n.GetDraining() {
			continue
		}
		nodes = append(nodes, binpack.Node{ID: hex.EncodeToString(n.GetInfo().GetNodeId()), Available: plain(n.GetInfo().GetTotal().GetAmounts())})
	}
	for _, t := range a.insts {
		if s := t.inst.State(); s.Pending() || s == instance.Requested {
			if nt, ok := c.NodeType(t.inst.NodeType); ok {
				set, _ := resources.FromFloats(nt.Resources)
				nodes = append(nodes, binpack.Node{ID: t.inst.ID, Type: nt.Name, Available: set})
			}
		}
	}
	for id, lr := range a.launches {
		if nt, ok := c.NodeType(lr.nodeType); ok {
			set, _ := resources.FromFloats(nt.Resources)
			for i := len(lr.listed); i < lr.count; i++ {
				nodes = append(nodes, binpack.Node{ID: fmt.Sprintf("%s/%d", id, i), Type: nt.Name, Available: set.Clone()})
			}
		}
	}
	return nodes
}

// requestsFitWithout reports whether the explicit requests lose nothing
// when the nodes in without (hex ids) go: as many of their bundles fit
// the other nodes' totals as fit with node kept. Bundles that fit nowhere
// anyway (larger than any node) hold no node.
func requestsFitWithout(nodes []binpack.Node, reqs []binpack.Demand, without map[string]bool, node string) bool {
	if len(reqs) == 0 {
		return true
	}
	var rest []binpack.Node
	for _, n := range nodes {
		if !without[n.ID] || n.ID == node {
			rest = append(rest, n)
		}
	}
	with := fitCount(rest, reqs)
	rest = slices.DeleteFunc(rest, func(n binpack.Node) bool { return n.ID == node })
	return fitCount(rest, reqs) >= with
}

// fitCount returns how many of the requested bundles fit the nodes'
// resources at once, placing the largest first, each on the first node
// with room (first fit decreasing: deterministic, and what matters here is
// whether removing a node lowers it).
func fitCount(nodes []binpack.Node, reqs []binpack.Demand) int {
	free := make([]resources.Set, len(nodes))
	for i, n := range nodes {
		free[i] = n.Available.Clone()
	}
	order := slices.Clone(reqs)
	size := func(s resources.Set) int64 {
		var n int64
		for _, v := range s {
			n += v
		}
		return n
	}
	sort.SliceStable(order, func(i, j int) bool { return size(order[i].Shape) > size(order[j].Shape) })
	placed := 0
	for _, d := range order {
		for range d.Count {
			for _, f := range free {
				if f.Fits(d.Shape) {
					f.Sub(d.Shape)
					placed++
					break
				}
			}
		}
	}
	return placed
}

// idleInstances returns the worker instances to drain this round: those
// draining already, and the running ones idle for the idle timeout that
// may go (above their type's min_workers, and not needed by a standing
// request), which it moves to Draining; a.mu is held. Idle: every
// resource available and nothing queued. Whether the node may go with the
// objects it holds is the drain's answer (see drain).
func (a *Autoscaler) idleInstances(l *load, now time.Time) []string {
	c := a.cfg.Cluster
	total, _ := a.counts()
	for _, t := range a.insts {
		if t.inst.State() == instance.Draining {
			total[t.inst.NodeType]-- // going already
		}
	}
	alive := map[string]bool{}
	var out []string
	// Nodes the explicit requests need stay, idle or not.
	reqs, totals, going := requestDemands(l.requests), a.totals(l), map[string]bool{}
	ids := make([]string, 0, len(a.insts))
	for id := range a.insts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		t := a.insts[id]
		if t.inst.State() == instance.Draining {
			going[t.inst.NodeID] = true
			out = append(out, id)
			continue
		}
		if t.inst.State() != instance.Running || t.node == nil || t.node.GetInfo().GetState() != "ALIVE" {
			continue
		}
		nodeID := t.inst.NodeID
		alive[nodeID] = true
		n := t.node
		if !isIdle(n) {
			delete(a.idleSince, nodeID)
			t.detail = ""
			continue
		}
		since, ok := a.idleSince[nodeID]
		if !ok {
			since = now
			a.idleSince[nodeID] = now
		}
		// Above its type's or the cluster's max_workers (the file was
		// changed, or the type is gone from it): idle goes at once.
		nt, _ := c.NodeType(t.inst.NodeType)
		over := nt == nil || total[t.inst.NodeType] > nt.MaxWorkers || sum(total) > c.MaxWorkers && total[t.inst.NodeType] > nt.MinWorkers
		if !over && (now.Sub(since) < c.IdleTimeout || total[t.inst.NodeType] <= nt.MinWorkers) {
			continue
		}
		going[nodeID] = true
		if !requestsFitWithout(totals, reqs, going, nodeID) {
			delete(going, nodeID)
			continue
		}
		total[t.inst.NodeType]--
		why := "idle for " + now.Sub(since).Round(time.Second).String()
		if over {
			why = "idle and above max_workers (or of a node type the cluster file no longer has)"
		}
		a.apply(t, instance.Event{Kind: instance.Idle, Reason: why}, now)
		out = append(out, id)
	}
	for id := range a.idleSince {
		if !alive[id] {
			delete(a.idleSince, id)
		}
	}
	return out
}

// DefaultDrainTimeout bounds a drain: a node not drained by then (its
// objects cannot be spilled) is put back to work.
const DefaultDrainTimeout = 10 * time.Minute

// drain asks the GCS to drain each instance's node (Ray's DrainNode): the
// node takes no new work and moves its primary copies of objects to
// shared spill storage. It returns the instances whose node is drained,
// which may be terminated. A node that refuses (it got work meanwhile, or
// holds objects it has nowhere to move) goes back to Running and starts
// its idle time again; one whose drain does not finish within the drain
// timeout is put back too, as a failure.
func (a *Autoscaler) drain(ctx context.Context, insts []string, now time.Time) []string {
	var done []string
	for _, id := range insts {
		a.mu.Lock()
		t := a.insts[id]
		var nodeID []byte
		var since time.Time
		if t != nil {
			nodeID, _ = hex.DecodeString(t.inst.NodeID)
			since = t.inst.Since()
		}
		a.mu.Unlock()
		if t == nil || len(nodeID) == 0 {
			continue
		}
		timeout := a.cfg.DrainTimeout
		if timeout <= 0 {
			timeout = DefaultDrainTimeout
		}
		cancel := now.Sub(since) > timeout
		rep, err := a.cfg.GCS.DrainNode(ctx, &pb.DrainNodeRequest{NodeId: nodeID, Reason: "idle for " + a.cfg.Cluster.IdleTimeout.String() + " (autoscaler)", Cancel: cancel})
		a.mu.Lock()
		switch {
		case err != nil:
			// The node may be dying (NodeDead comes from the GCS's list)
			// or the GCS is away: ask again next round.
			a.log.Debug("drain call failed", "instance", id, "error", err)
			t.detail = "drain: " + err.Error()
		case cancel:
			a.recordFailure(t.inst.NodeType, fmt.Sprintf("instance %s: not drained within %s (%s); it goes back to work", id, timeout, t.detail), now)
			a.apply(t, instance.Event{Kind: instance.DrainRejected, Reason: "drain timed out"}, now)
			a.idleSince[t.inst.NodeID] = now
			t.detail = ""
		case !rep.GetAccepted():
			a.log.Info("the node refused to drain; it stays", "instance", id, "reason", rep.GetRejectionReason())
			a.apply(t, instance.Event{Kind: instance.DrainRejected, Reason: rep.GetRejectionReason()}, now)
			a.idleSince[t.inst.NodeID] = now
			t.detail = "kept: " + rep.GetRejectionReason()
		case rep.GetDrained():
			a.apply(t, instance.Event{Kind: instance.DrainDone, Reason: rep.GetProgress()}, now)
			t.detail = ""
			done = append(done, id)
		default:
			t.detail = rep.GetProgress()
		}
		a.mu.Unlock()
	}
	return done
}

// isIdle: nothing leased (available equals total but for the object
// store) and nothing queued.
func isIdle(n *pb.NodeView) bool {
	if len(n.GetPending()) > 0 {
		return false
	}
	total, avail := n.GetInfo().GetTotal().GetAmounts(), n.GetAvailable().GetAmounts()
	for k, v := range total {
		if k == resources.ObjectStoreMemory || resources.IsGroupName(k) {
			continue
		}
		if avail[k] < v {
			return false
		}
	}
	return true
}

// launch asks the provider for count instances of nodeType.
func (a *Autoscaler) launch(ctx context.Context, nodeType string, count int, now time.Time) {
	c := a.cfg.Cluster
	nt, ok := c.NodeType(nodeType)
	if !ok || count <= 0 {
		return
	}
	labels := map[string]string{}
	for k, v := range nt.Labels {
		labels[k] = v
	}
	labels[provider.LabelClusterName] = c.Name
	labels[provider.LabelNodeType] = nodeType
	id := newRequestID()
	req := &provider.LaunchRequest{
		RequestID: id, ClusterName: c.Name, NodeType: nodeType, Count: count, NodeConfig: a.cfg.NodeConfigs[nodeType],
		Node: provider.NodeSpec{HeadAddress: a.cfg.HeadAddress, Resources: nt.Resources, Labels: labels, AuthToken: a.cfg.AuthToken, SetupCommands: c.SetupCommands},
	}
	a.mu.Lock()
	a.launches[id] = &launch{nodeType: nodeType, count: count, sent: now, listed: map[string]bool{}, req: req}
	a.mu.Unlock()
	a.log.Info("launching instances", "node_type", nodeType, "count", count, "request", id)
	a.send(ctx, id, now)
}

// send sends launch request id to the provider. A request the provider
// refuses (bad request, quota) is a failure and backs its node type off;
// any other error (the plugin crashed or restarts, the call timed out)
// leaves the request to be sent again, with the same id, next round: the
// provider may have taken it, and launches nothing twice for one id.
func (a *Autoscaler) send(ctx context.Context, id string, now time.Time) {
	a.mu.Lock()
	lr := a.launches[id]
	a.mu.Unlock()
	if lr == nil {
		return
	}
	_, err := a.cfg.Provider.Launch(ctx, lr.req)
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case err == nil:
		lr.accepted = true
	case errors.Is(err, provider.ErrInvalidRequest) || errors.Is(err, provider.ErrQuotaExceeded) || errors.Is(err, provider.ErrNotFound):
		delete(a.launches, id)
		a.recordFailure(lr.nodeType, fmt.Sprintf("launch of %d: %v", lr.count, err), now)
		a.backoff.Failed(lr.nodeType, now)
	default:
		if !lr.failedOnce { // once per request: the list keeps room for other causes
			lr.failedOnce = true
			a.recordFailure(lr.nodeType, fmt.Sprintf("launch %s of %d: %v (sending the same request again)", id, lr.count, err), now)
		}
	}
}

// terminate asks the provider to stop the instances.
func (a *Autoscaler) terminate(ctx context.Context, ids []string, why string, now time.Time) {
	a.log.Info("terminating instances", "instances", ids, "reason", why)
	_, err := a.cfg.Provider.Terminate(ctx, &provider.TerminateRequest{RequestID: newRequestID(), ClusterName: a.cfg.Cluster.Name, InstanceIDs: ids})
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range ids {
		t := a.insts[id]
		if t == nil {
			continue
		}
		if err != nil {
			a.apply(t, instance.Event{Kind: instance.Error, Reason: err.Error()}, now)
			continue
		}
		t.terminateSent = true
		a.apply(t, instance.Event{Kind: instance.TerminateSent, Reason: why}, now)
	}
	if err != nil {
		a.recordFailure("", fmt.Sprintf("terminate %v: %v", ids, err), now)
	}
}

// newRequestID returns a random request id.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "req-" + hex.EncodeToString(b[:])
}

// plain drops placement group resources from a node's amounts.
func plain(m map[string]int64) resources.Set {
	out := resources.Set{}
	for k, v := range m {
		if !resources.IsGroupName(k) {
			out[k] = v
		}
	}
	return out
}

func hasGroup(s resources.Set) bool {
	for k := range s {
		if resources.IsGroupName(k) {
			return true
		}
	}
	return false
}

func strategyName(s pb.PlacementStrategy) string {
	switch s {
	case pb.PlacementStrategy_PLACEMENT_STRATEGY_SPREAD:
		return binpack.Spread
	case pb.PlacementStrategy_PLACEMENT_STRATEGY_STRICT_PACK:
		return binpack.StrictPack
	case pb.PlacementStrategy_PLACEMENT_STRATEGY_STRICT_SPREAD:
		return binpack.StrictSpread
	}
	return binpack.Pack
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
