package autoscaler

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/goray-dev/goray/autoscaler/internal/binpack"
	"github.com/goray-dev/goray/autoscaler/internal/instance"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/sdk/provider"
)

// Status is the autoscaler's view of the cluster, as `goray status` shows
// it (Ray's "Autoscaler status" section). Its JSON form is what the
// autoscaler publishes in the GCS's KV store (StatusNamespace/StatusKey).
type Status struct {
	// Cluster is the cluster's name.
	Cluster string `json:"cluster"`
	// At is when the round that made it ran.
	At time.Time `json:"at"`
	// Interval is how often the autoscaler runs a round (a status older
	// than a few of them is stale).
	Interval time.Duration `json:"interval"`
	// LastError is why the latest round failed, when it did (the provider
	// or the GCS could not be read), and LastErrorAt when; the rest is
	// the last good round's.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// Active counts the running worker nodes by node type (the head is
	// not counted).
	Active map[string]int `json:"active"`
	// Pending are the instances launched but not running yet, and the
	// launches not yet listed by the provider.
	Pending []PendingInstance `json:"pending"`
	// Draining are instances whose node is being drained before it is
	// terminated (they count as active), with the drain's progress.
	Draining []PendingInstance `json:"draining"`
	// Kept are idle instances whose node refused to drain, with why (it
	// holds objects it has nowhere to move, say); they stay.
	Kept []PendingInstance `json:"kept,omitempty"`
	// Terminating are instances being stopped.
	Terminating []PendingInstance `json:"terminating"`
	// Failures are the recent launch and terminate failures, newest last.
	Failures []Failure `json:"failures"`
	// Demands is the round's unmet demand: resource shapes of queued work
	// and explicit requests, and pending placement groups; Infeasible
	// ones fit no node type and launch nothing.
	Demands []Demand `json:"demands"`
	// Launched counts, by node type, what the round asked the provider
	// for.
	Launched map[string]int `json:"launched"`
	// BackingOff are node types whose launches wait after failures, with
	// when they may launch again.
	BackingOff map[string]time.Time `json:"backing_off,omitempty"`
}

// PendingInstance is an instance on its way up or down.
type PendingInstance struct {
	// ID is the provider's instance id ("" for a launch not listed yet).
	ID       string `json:"id,omitempty"`
	NodeType string `json:"node_type"`
	// State is the instance's state ("requested", "allocated",
	// "installing", "terminating", ...).
	State   string `json:"state"`
	Address string `json:"address,omitempty"`
	// Since is when it entered the state.
	Since time.Time `json:"since"`
	// Detail is a drain's progress, or why the node was kept.
	Detail string `json:"detail,omitempty"`
}

// Failure is one failed launch or terminate, or an instance that never
// joined.
type Failure struct {
	NodeType string    `json:"node_type"`
	Message  string    `json:"message"`
	At       time.Time `json:"at"`
}

// Demand is one unmet demand: Count bundles of Resources, or a placement
// group's Bundles with its Strategy.
type Demand struct {
	Resources  map[string]float64   `json:"resources,omitempty"`
	Bundles    []map[string]float64 `json:"bundles,omitempty"`
	Strategy   string               `json:"strategy,omitempty"`
	Count      int                  `json:"count"`
	Infeasible bool                 `json:"infeasible"`
	// Request says the demand is an explicit request
	// (ray.RequestResources), packed onto the nodes' totals rather than
	// onto their free resources.
	Request bool `json:"request,omitempty"`
}

// publish records the round's status and writes it to the GCS.
func (a *Autoscaler) publish(ctx context.Context, l *load, plan binpack.Result, demands []Demand, now time.Time) error {
	a.mu.Lock()
	st := Status{Cluster: a.cfg.Cluster.Name, At: now, Interval: a.cfg.Interval, Active: map[string]int{}, Pending: []PendingInstance{}, Draining: []PendingInstance{}, Terminating: []PendingInstance{},
		Failures: append([]Failure{}, a.failures...), Demands: demands, Launched: plan.Launch}
	if st.Demands == nil {
		st.Demands = []Demand{}
	}
	for _, t := range a.insts {
		pi := PendingInstance{ID: t.inst.ID, NodeType: t.inst.NodeType, State: t.inst.State().String(), Address: t.address, Since: t.inst.Since(), Detail: t.detail}
		switch s := t.inst.State(); {
		case s == instance.Draining:
			st.Active[t.inst.NodeType]++
			st.Draining = append(st.Draining, pi)
		case s == instance.Running:
			st.Active[t.inst.NodeType]++
			if t.detail != "" {
				st.Kept = append(st.Kept, pi)
			}
		case s == instance.Terminating || s.Failed():
			st.Terminating = append(st.Terminating, pi)
		case s != instance.Terminated:
			st.Pending = append(st.Pending, pi)
		}
	}
	for id, lr := range a.launches {
		for i := len(lr.listed); i < lr.count; i++ {
			st.Pending = append(st.Pending, PendingInstance{NodeType: lr.nodeType, State: "requested (" + id + ")", Since: lr.sent})
		}
	}
	for _, nt := range a.cfg.Cluster.NodeTypes {
		if failures, at := a.backoff.Status(nt.Name); failures > 0 && at.After(now) {
			if st.BackingOff == nil {
				st.BackingOff = map[string]time.Time{}
			}
			st.BackingOff[nt.Name] = at
		}
	}
	sortPending := func(p []PendingInstance) {
		sort.Slice(p, func(i, j int) bool {
			if p[i].NodeType != p[j].NodeType {
				return p[i].NodeType < p[j].NodeType
			}
			return p[i].ID < p[j].ID
		})
	}
	sortPending(st.Pending)
	sortPending(st.Draining)
	sortPending(st.Kept)
	sortPending(st.Terminating)
	a.status = st
	a.mu.Unlock()
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if _, err := a.cfg.GCS.KVPut(ctx, &pb.KVPutRequest{Ns: StatusNamespace, Key: StatusKey, Value: b, Overwrite: true}); err != nil {
		return fmt.Errorf("autoscaler: publishing the status: %w", err)
	}
	return nil
}

// publishError records that a round failed and publishes the last good
// status with the error (best effort: the GCS may be what failed).
func (a *Autoscaler) publishError(ctx context.Context, err error) {
	a.mu.Lock()
	st := a.status
	if st.Cluster == "" {
		st = Status{Cluster: a.cfg.Cluster.Name, Interval: a.cfg.Interval, Active: map[string]int{}, Pending: []PendingInstance{},
			Draining: []PendingInstance{}, Terminating: []PendingInstance{}, Failures: []Failure{}, Demands: []Demand{}}
	}
	st.LastError, st.LastErrorAt = provider.RedactToken(err.Error(), a.cfg.AuthToken), a.now()
	a.status = st
	a.mu.Unlock()
	b, jerr := json.Marshal(st)
	if jerr != nil {
		return
	}
	_, _ = a.cfg.GCS.KVPut(ctx, &pb.KVPutRequest{Ns: StatusNamespace, Key: StatusKey, Value: b, Overwrite: true})
}
