package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/goray-dev/goray/autoscaler"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// autoscalerStaleAfter is the age past which `goray status` marks the
// autoscaler's status stale: three rounds missed.
// (Of a status that says its interval: three of those.)
const autoscalerStaleAfter = 3 * autoscaler.DefaultInterval

// intervalOf is how often the autoscaler that published st runs.
func intervalOf(st *autoscaler.Status) time.Duration {
	if st.Interval > 0 {
		return st.Interval
	}
	return autoscaler.DefaultInterval
}

// autoscalerFailuresShown bounds the recent failures the text shows
// (--json has every one the autoscaler kept).
const autoscalerFailuresShown = 5

// kvReader reads the GCS's KV store.
type kvReader interface {
	// KVGet returns the value of key in namespace ns and whether it
	// exists.
	KVGet(ctx context.Context, ns, key string) (value []byte, found bool, err error)
}

// statusCluster is what `goray status` asks of a cluster: the queries of
// list, and the KV store, where the autoscaler publishes its status.
type statusCluster interface {
	cluster
	kvReader
}

// KVGet reads key of namespace ns from the GCS's KV store.
func (c *grpcCluster) KVGet(ctx context.Context, ns, key string) ([]byte, bool, error) {
	r, err := c.gcs.KVGet(ctx, &pb.KVGetRequest{Ns: ns, Key: key})
	if err != nil {
		return nil, false, c.gcsErr(fmt.Sprintf("key %q of KV namespace %q", key, ns), err)
	}
	return r.GetValue(), r.GetFound(), nil
}

// errNoStatusTime says a published status has no time.
var errNoStatusTime = errors.New(`it has no time ("at")`)

// addAutoscaler puts the autoscaler's status into the report: value is
// what the KV holds under autoscaler.StatusNamespace/StatusKey (found
// false: no autoscaler), readErr the error reading it. A status that
// cannot be read is reported in AutoscalerError, never an error of the
// command. r.asOf must be set: the status is aged against it.
func (r *statusReport) addAutoscaler(value []byte, found bool, readErr error) {
	where := fmt.Sprintf("key %q of the GCS's KV namespace %q", autoscaler.StatusKey, autoscaler.StatusNamespace)
	switch {
	case readErr != nil:
		r.AutoscalerError = "cannot read the autoscaler's status: " + readErr.Error()
		return
	case !found:
		return
	}
	var st autoscaler.Status
	err := json.Unmarshal(value, &st)
	if err == nil && st.At.IsZero() {
		err = errNoStatusTime
	}
	if err != nil {
		r.AutoscalerError = fmt.Sprintf("the autoscaler's status in %s is unreadable: %v", where, err)
		return
	}
	r.Autoscaler = &st
	r.AutoscalerStale = r.asOf.Sub(st.At) > max(autoscalerStaleAfter, 3*intervalOf(&st))
}

// addResourceRequest records the standing ray.RequestResources request
// read from the KV (value, when found): a cluster without an autoscaler
// stores it and nothing acts on it, so status shows it there too.
func (r *statusReport) addResourceRequest(value []byte, found bool, readErr error) {
	switch {
	case readErr != nil:
		r.ResourceRequestError = "cannot read the resource request: " + readErr.Error()
		return
	case !found || len(value) == 0:
		return
	}
	var req []autoscaler.Request
	if err := json.Unmarshal(value, &req); err != nil {
		r.ResourceRequestError = fmt.Sprintf("the resource request in key %q of the GCS's KV namespace %q is unreadable: %v", autoscaler.RequestsKey, autoscaler.StatusNamespace, err)
		return
	}
	r.ResourceRequest = req
}

// writeResourceRequest writes the standing ray.RequestResources request
// of a cluster whose autoscaler does not publish its demands (with one,
// the request is among them).
func writeResourceRequest(w io.Writer, r statusReport) error {
	if r.ResourceRequestError != "" {
		_, err := fmt.Fprintf(w, "Resource request: UNREADABLE: %s\n", r.ResourceRequestError)
		return err
	}
	if len(r.ResourceRequest) == 0 {
		return nil
	}
	fmt.Fprintln(w, "Resource request (ray.RequestResources), stored; no autoscaler acts on it:")
	for _, q := range r.ResourceRequest {
		if _, err := fmt.Fprintf(w, "  %s x %d\n", floatSetText(q.Resources), q.Count); err != nil {
			return err
		}
	}
	return nil
}

// age formats how long before now t was, in whole seconds ("0s" for a
// time after now: the clocks of the autoscaler and of the GCS are the
// head's, but a status may be read back from storage).
func age(t, now time.Time) string {
	return max(now.Sub(t), 0).Round(time.Second).String()
}

// floatSetText formats a resource shape in float amounts as status shows
// sets: {CPU: 1, memory: 2.0 GiB}.
func floatSetText(m map[string]float64) string {
	set, err := resources.FromFloats(m)
	if err != nil { // not a shape the runtime would publish: show it raw
		return fmt.Sprint(m)
	}
	return "{" + formatSet(amounts(set)) + "}"
}

// countsText formats node counts by type, as "2 cpu, 1 gpu" (types
// sorted, zeros left out), or "(none)".
func countsText(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
		}
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, ", ")
}

// writeAutoscaler renders the autoscaler's section of `goray status`
// (Ray's "Autoscaler status"): its nodes by state, recent failures,
// backoffs and the demand it sees.
func writeAutoscaler(w io.Writer, r statusReport) error {
	fmt.Fprintln(w)
	if r.AutoscalerError != "" {
		_, err := fmt.Fprintf(w, "Autoscaler: STATUS UNREADABLE: %s\n", r.AutoscalerError)
		return err
	}
	st := r.Autoscaler
	if st == nil {
		if _, err := fmt.Fprintln(w, "Autoscaler: not running (no status published; a cluster started with `goray start` has none, `goray up` starts one)"); err != nil {
			return err
		}
		return writeResourceRequest(w, r)
	}
	now := r.asOf
	name := ""
	if st.Cluster != "" {
		name = " of cluster " + st.Cluster
	}
	stale := ""
	if r.AutoscalerStale {
		stale = fmt.Sprintf("; STALE: it publishes every %s, is it running?", intervalOf(st))
	}
	fmt.Fprintf(w, "Autoscaler%s: status of %s (%s ago%s)\n", name, formatTime(st.At.UnixMilli()), age(st.At, now), stale)
	if st.LastError != "" {
		fmt.Fprintf(w, "  LAST ROUND FAILED (%s ago): %s\n", age(st.LastErrorAt, now), st.LastError)
	}
	fmt.Fprintf(w, "  Active workers: %s\n", countsText(st.Active))
	if err := writeInstances(w, "Pending", st.Pending, now); err != nil {
		return err
	}
	if len(st.Draining) > 0 {
		if err := writeInstances(w, "Draining (no new work; objects moving to spill storage)", st.Draining, now); err != nil {
			return err
		}
	}
	if len(st.Kept) > 0 {
		if err := writeInstances(w, "Idle but kept (the node refused to drain)", st.Kept, now); err != nil {
			return err
		}
	}
	if err := writeInstances(w, "Terminating", st.Terminating, now); err != nil {
		return err
	}
	if err := writeFailures(w, st.Failures, now); err != nil {
		return err
	}
	if len(st.BackingOff) == 0 {
		fmt.Fprintln(w, "  Backing off: (none)")
	} else {
		fmt.Fprintln(w, "  Backing off (launches wait after failures):")
		t := newTable(w)
		for _, nt := range slices.Sorted(maps.Keys(st.BackingOff)) {
			until := st.BackingOff[nt]
			left := "over"
			if d := until.Sub(now); d > 0 {
				left = "in " + d.Round(time.Second).String()
			}
			t.row("    "+nt, "until "+formatTime(until.UnixMilli()), "("+left+")")
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if launched := countsText(st.Launched); launched != "(none)" {
		fmt.Fprintf(w, "  Launched by the last round: %s\n", launched)
	}
	return writeAutoscalerDemands(w, st.Demands)
}

// writeInstances writes the pending or terminating instances as a table.
func writeInstances(w io.Writer, title string, ps []autoscaler.PendingInstance, now time.Time) error {
	if len(ps) == 0 {
		_, err := fmt.Fprintf(w, "  %s: (none)\n", title)
		return err
	}
	fmt.Fprintf(w, "  %s:\n", title)
	detail := false
	for _, p := range ps {
		detail = detail || p.Detail != ""
	}
	head := []string{"    NODE TYPE", "INSTANCE", "ADDRESS", "STATE", "FOR"}
	if detail {
		head = append(head, "DETAIL")
	}
	t := newTable(w, head...)
	for _, p := range ps {
		addr := p.Address
		if addr == "" {
			addr = "(no address yet)"
		}
		row := []string{"    " + p.NodeType, orDash(p.ID), addr, p.State, age(p.Since, now)}
		if detail {
			row = append(row, orDash(p.Detail))
		}
		t.row(row...)
	}
	return t.flush()
}

// writeFailures writes the newest recent failures first.
func writeFailures(w io.Writer, fs []autoscaler.Failure, now time.Time) error {
	if len(fs) == 0 {
		_, err := fmt.Fprintln(w, "  Recent failures: (none)")
		return err
	}
	fmt.Fprintln(w, "  Recent failures (newest first):")
	t := newTable(w)
	for i := len(fs) - 1; i >= 0 && i >= len(fs)-autoscalerFailuresShown; i-- {
		f := fs[i]
		t.row("    "+f.NodeType, age(f.At, now)+" ago", f.Message)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if n := len(fs) - autoscalerFailuresShown; n > 0 {
		fmt.Fprintf(w, "    (%s not shown; goray status --json lists them)\n", plural(n, "earlier failure", "earlier failures"))
	}
	return nil
}

// writeAutoscalerDemands writes the unmet demand of the autoscaler's last
// round: shapes with their counts, and placement groups.
func writeAutoscalerDemands(w io.Writer, ds []autoscaler.Demand) error {
	if len(ds) == 0 {
		_, err := fmt.Fprintln(w, "  Demands: (none)")
		return err
	}
	fmt.Fprintln(w, "  Demands (queued work, pending placement groups, ray.RequestResources):")
	for _, d := range ds {
		var line string
		if len(d.Bundles) > 0 {
			bundles := make([]string, len(d.Bundles))
			for i, b := range d.Bundles {
				bundles[i] = floatSetText(b)
			}
			line = fmt.Sprintf("    placement group %s: %s", orDash(d.Strategy), strings.Join(bundles, " "))
			if d.Count > 1 {
				line += fmt.Sprintf(" x %d", d.Count)
			}
		} else {
			line = fmt.Sprintf("    %s x %d", floatSetText(d.Resources), d.Count)
		}
		if d.Infeasible {
			line += " (infeasible: no node type can hold it)"
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}
