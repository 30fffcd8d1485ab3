package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/state"
	"github.com/spf13/cobra"
)

// actorRow is one actor of `list actors`.
type actorRow struct {
	ActorID        string  `json:"actor_id"`
	JobID          string  `json:"job_id"`
	Name           string  `json:"name"`
	ClassName      string  `json:"class_name"`
	State          string  `json:"state"`
	Namespace      string  `json:"namespace"`
	Lifetime       string  `json:"lifetime"` // "detached" or "owned"
	NodeID         string  `json:"node_id"`
	WorkerID       string  `json:"worker_id"`
	Pid            int32   `json:"pid"`
	Resources      amounts `json:"resources"`
	MaxConcurrency int32   `json:"max_concurrency"`
	MaxRestarts    int32   `json:"max_restarts"`
	NumRestarts    int32   `json:"num_restarts"`
	DeathReason    string  `json:"death_reason,omitempty"`
	StartTimeMs    int64   `json:"start_time_ms"`
	EndTimeMs      int64   `json:"end_time_ms,omitempty"`
}

// jobRow is one job of `list jobs`.
type jobRow struct {
	JobID        string `json:"job_id"`
	State        string `json:"state"`
	DriverPid    int32  `json:"driver_pid"`
	DriverNodeID string `json:"driver_node_id"`
	BinaryPath   string `json:"binary_path"`
	BinarySHA256 string `json:"binary_sha256,omitempty"`
	WorkingDir   string `json:"working_dir,omitempty"`
	// WorkingDirSHA256 is the sha256 of the working dir the job ships
	// (ray.WorkingDir), when it ships one.
	WorkingDirSHA256 string `json:"working_dir_sha256,omitempty"`
	StartTimeMs      int64  `json:"start_time_ms"`
	EndTimeMs        int64  `json:"end_time_ms,omitempty"`
}

func actorRows(as []*pb.ActorInfo) []actorRow {
	out := []actorRow{}
	for _, a := range as {
		out = append(out, actorRow{
			ActorID: hexID(a.GetActorId()), JobID: hexID(a.GetJobId()), Name: a.GetName(), ClassName: a.GetClassName(),
			State: strings.TrimPrefix(a.GetState().String(), "ACTOR_STATE_"), NodeID: hexID(a.GetAddress().GetNodeId()),
			WorkerID: hexID(a.GetAddress().GetWorkerId()), Pid: a.GetPid(), Resources: amountsOf(a.GetResources()),
			MaxConcurrency: a.GetMaxConcurrency(), MaxRestarts: a.GetMaxRestarts(), NumRestarts: a.GetNumRestarts(), DeathReason: a.GetDeathReason(),
			StartTimeMs: a.GetStartTimeMs(), EndTimeMs: a.GetEndTimeMs(), Namespace: a.GetNamespace(), Lifetime: lifetimeOf(a),
		})
	}
	slices.SortStableFunc(out, func(a, b actorRow) int {
		return cmp.Or(cmp.Compare(a.StartTimeMs, b.StartTimeMs), cmp.Compare(a.ActorID, b.ActorID))
	})
	return out
}
func jobRows(js []*pb.JobInfo) []jobRow {
	out := []jobRow{}
	for _, j := range js {
		out = append(out, jobRow{
			JobID: hexID(j.GetJobId()), State: j.GetState(), DriverPid: j.GetDriverPid(), DriverNodeID: hexID(j.GetDriverNodeId()),
			BinaryPath: j.GetBinaryPath(), BinarySHA256: j.GetBinarySha256(), WorkingDir: j.GetWorkingDir(),
			WorkingDirSHA256: j.GetWorkingDirSha256(), StartTimeMs: j.GetStartTimeMs(), EndTimeMs: j.GetEndTimeMs(),
		})
	}
	slices.SortStableFunc(out, func(a, b jobRow) int {
		return cmp.Or(cmp.Compare(a.StartTimeMs, b.StartTimeMs), cmp.Compare(a.JobID, b.JobID))
	})
	return out
}

// lifetimeOf is an actor's lifetime as `list actors` shows it: "detached"
// (it outlives its job) or "owned" (it ends with its owner or job).
func lifetimeOf(a *pb.ActorInfo) string {
	if a.GetDetached() {
		return "detached"
	}
	return "owned"
}

func writeActors(w io.Writer, as []actorRow) error {
	t := newTable(w, "ACTOR ID", "CLASS", "NAME", "NAMESPACE", "LIFETIME", "STATE", "JOB", "NODE", "PID", "RESOURCES", "DEATH REASON")
	for _, a := range as {
		t.row(a.ActorID, orDash(a.ClassName), orDash(a.Name), orDash(a.Namespace), a.Lifetime, a.State, shortHex(a.JobID), shortHex(a.NodeID),
			pidCell(a.Pid), formatSet(a.Resources), orDash(a.DeathReason))
	}
	return t.flush()
}
func writeJobs(w io.Writer, js []jobRow) error {
	t := newTable(w, "JOB ID", "STATE", "DRIVER PID", "DRIVER NODE", "BINARY", "STARTED", "ENDED")
	for _, j := range js {
		t.row(j.JobID, j.State, pidCell(j.DriverPid), shortHex(j.DriverNodeID), orDash(j.BinaryPath), formatTime(j.StartTimeMs), formatTime(j.EndTimeMs))
	}
	return t.flush()
}
func pidCell(pid int32) string {
	if pid <= 0 {
		return "-"
	}
	return strconv.Itoa(int(pid))
}

// nodeIP is the host of a node's raylet TCP address ("-" when none).
func nodeIP(n nodeStatus) string {
	if host, _, err := net.SplitHostPort(n.RayletTCP); err == nil {
		return host
	}
	return "-"
}

// writeNodes writes the nodes in columns that fit about 120 characters:
// short ids, no socket paths (those are in --detail).
func writeNodes(w io.Writer, ns []nodeStatus) error {
	anyDead := slices.ContainsFunc(ns, func(n nodeStatus) bool { return n.State != stateAlive })
	header := []string{"NODE ID", "NAME", "STATE", "HEAD", "IP", "PID", "CPU", "GPU", "MEMORY", "STARTED"}
	if anyDead {
		header = append(header, "DEATH REASON")
	}
	t := newTable(w, header...)
	for _, n := range ns {
		head := ""
		if n.IsHead {
			head = "*"
		}
		row := []string{shortHex(n.NodeID), orDash(n.NodeName), n.State, head, nodeIP(n), pidCell(n.Pid),
			formatAmount(resources.CPU, n.ResourcesTotal[resources.CPU]), formatAmount(resources.GPU, n.ResourcesTotal[resources.GPU]),
			formatAmount(resources.Memory, n.ResourcesTotal[resources.Memory]), formatTime(n.StartTimeMs)}
		if anyDead {
			row = append(row, orDash(n.DeathReason))
		}
		t.row(row...)
	}
	return t.flush()
}

func writeTasks(w io.Writer, ts []state.TaskRow) error {
	t := newTable(w, "TASK ID", "ATTEMPT", "NAME", "STATE", "JOB", "NODE", "WORKER", "PID", "ERROR")
	for _, k := range ts {
		name := k.Name
		if name == "" {
			name = k.Function
		}
		if k.ActorClass != "" && k.Kind == "ACTOR_METHOD" {
			name = k.ActorClass + "." + name
		}
		errCell := k.ErrorType
		if k.ErrorMessage != "" {
			errCell = strings.TrimPrefix(errCell+": "+k.ErrorMessage, ": ")
		}
		// The whole id: a task id starts with its owner's prefix and ends
		// in a counter, so a short one would not tell tasks apart.
		t.row(k.TaskID, strconv.Itoa(int(k.Attempt)), orDash(name), k.State, shortHex(k.JobID), shortHex(k.NodeID),
			shortHex(k.WorkerID), pidCell(k.Pid), orDash(truncateCell(errCell, 60)))
	}
	return t.flush()
}

func writeObjects(w io.Writer, objs []state.ObjectRow) error {
	t := newTable(w, "OBJECT ID", "STATE", "SIZE", "WHERE", "OWNER", "REFS (LOCAL/SUBMITTED/BORROWERS)", "CALL SITE")
	for _, o := range objs {
		t.row(o.ObjectID, orDash(o.State), humanize.IBytes(uint64(max(o.Size, 0))), whereCell(o), ownerCell(o.OwnerWorkerID, o.OwnerNodeID), refsCell(o), orDash(o.CallSite))
	}
	return t.flush()
}

func whereCell(o state.ObjectRow) string {
	where := "inline in owner"
	if o.Where != state.WhereInline {
		nodes := make([]string, len(o.StoreNodes))
		for i, n := range o.StoreNodes {
			nodes[i] = shortHex(n)
		}
		where = "store on node " + orDash(strings.Join(nodes, ","))
		if len(nodes) == 0 && len(o.Spilled) > 0 {
			where = "spilled"
		}
	}
	if len(o.Spilled) > 0 {
		where += " (spilled to " + strings.Join(o.Spilled, ", ") + ")"
	}
	return where
}

func ownerCell(worker, node string) string {
	if worker == "" {
		return "-"
	}
	return shortHex(worker) + "@" + shortHex(node)
}

func refsCell(o state.ObjectRow) string {
	if o.OwnerWorkerID == "" {
		return "-"
	}
	return fmt.Sprintf("%d/%d/%d", o.LocalRefs, o.SubmittedRefs, o.Borrowers)
}

func writeWorkers(w io.Writer, ws []state.WorkerRow) error {
	t := newTable(w, "WORKER ID", "TYPE", "NODE", "PID", "JOB", "STATE", "ACTOR")
	for _, r := range ws {
		t.row(shortHex(r.WorkerID), r.Type, shortHex(r.NodeID), pidCell(r.Pid), shortHex(r.JobID), r.State, shortHex(r.ActorID))
	}
	return t.flush()
}

// truncateCell cuts s to n characters, marking the cut.
func truncateCell(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// writeDetail writes each row as a block of "field: value" lines (the
// row's JSON fields, in order), blocks separated by a blank line.
func writeDetail(w io.Writer, rows any) error {
	v := reflect.ValueOf(rows)
	for i := range v.Len() {
		if i > 0 {
			fmt.Fprintln(w)
		}
		b, err := json.Marshal(v.Index(i).Interface())
		if err != nil {
			return err
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if _, err := d.Token(); err != nil { // {
			return err
		}
		for d.More() {
			key, err := d.Token()
			if err != nil {
				return err
			}
			var raw json.RawMessage
			if err := d.Decode(&raw); err != nil {
				return err
			}
			val := string(raw)
			var s string
			if json.Unmarshal(raw, &s) == nil {
				val = s
			}
			if _, err := fmt.Fprintf(w, "%s: %s\n", key, val); err != nil {
				return err
			}
		}
	}
	return nil
}

// listKinds are the things `goray list` shows.
var listKinds = []string{"nodes", "jobs", "actors", "tasks", "objects", "placement-groups", "workers"}

// listOptions are the flags every list kind takes.
type listOptions struct {
	filters []string
	limit   int
	detail  bool
	asJSON  bool
}

func (o *listOptions) register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&o.filters, "filter", nil, "keep rows whose field (a JSON field name) equals a value: key=value, repeatable, case-insensitive")
	cmd.Flags().IntVar(&o.limit, "limit", state.DefaultLimit, "show at most this many rows (0: all)")
	cmd.Flags().BoolVar(&o.detail, "detail", false, "show every field, one block per row")
}

// listed is the result of one list: the rows and how to print them.
type listed struct {
	rows      any
	total     int
	truncated bool
	write     func() error
}

// page applies the filters and the limit to rows and prepares writing
// them.
func page[T any](rows []T, fs []state.Filter, limit int, write func([]T) error) (listed, error) {
	p, err := state.Apply(rows, fs, limit)
	if err != nil {
		return listed{}, err
	}
	return listed{rows: p.Rows, total: p.Total, truncated: p.Truncated, write: func() error { return write(p.Rows) }}, nil
}

// list runs `goray list <kind>` against c and writes the result.
func (a *app) list(ctx context.Context, c cluster, kind string, o listOptions) error {
	fs, err := state.ParseFilters(o.filters)
	if err != nil {
		return usagef("%v", err)
	}
	if o.limit < 0 {
		return usagef("--limit %d: want 0 (all) or more", o.limit)
	}
	gctx, cancel := context.WithTimeout(ctx, gcsTimeout)
	defer cancel()
	warn := func(msg string) { fmt.Fprintln(a.stderr, "warning: "+msg) }
	var l listed
	switch kind {
	case "nodes":
		views, err := c.Nodes(gctx)
		if err != nil {
			return err
		}
		ns := []nodeStatus{}
		for _, v := range views {
			ns = append(ns, nodeStatusOf(v))
		}
		sortNodes(ns)
		l, err = page(ns, fs, o.limit, func(r []nodeStatus) error { return writeNodes(a.stdout, r) })
		if err != nil {
			return usagef("%v", err)
		}
	case "tasks":
		tp, err := state.Tasks(gctx, c, fs, o.limit)
		if err != nil {
			var fe *state.FilterError
			if errors.As(err, &fe) {
				return usagef("%v", err)
			}
			return err
		}
		l = listed{rows: tp.Rows, total: tp.Total, truncated: tp.Truncated, write: func() error { return writeTasks(a.stdout, tp.Rows) }}
		if tp.Evicted > 0 {
			warn(fmt.Sprintf("the GCS evicted %d finished tasks to stay within its bound; they are not listed", tp.Evicted))
		}
		for _, job := range slices.Sorted(maps.Keys(tp.DroppedEvents)) {
			warn(fmt.Sprintf("processes of job %s dropped %d task events (their buffers were full or the GCS was unreachable); states may be behind", shortHex(job), tp.DroppedEvents[job]))
		}
	case "objects", "workers":
		if err := state.CheckFilters[state.ObjectRow](fs); err != nil && kind == "objects" {
			return usagef("%v", err)
		}
		if err := state.CheckFilters[state.WorkerRow](fs); err != nil && kind == "workers" {
			return usagef("%v", err)
		}
		d, err := state.GatherNodes(ctx, c, kind == "objects", warn)
		if err != nil {
			return err
		}
		if kind == "objects" {
			l, err = page(state.ObjectRows(d), fs, o.limit, func(r []state.ObjectRow) error { return writeObjects(a.stdout, r) })
		} else {
			l, err = page(state.WorkerRows(d), fs, o.limit, func(r []state.WorkerRow) error { return writeWorkers(a.stdout, r) })
		}
		if err != nil {
			return err
		}
	case "actors":
		as, err := c.Actors(gctx)
		if err != nil {
			return err
		}
		if l, err = page(actorRows(as), fs, o.limit, func(r []actorRow) error { return writeActors(a.stdout, r) }); err != nil {
			return usagef("%v", err)
		}
	case "jobs":
		js, err := c.Jobs(gctx)
		if err != nil {
			return err
		}
		if l, err = page(jobRows(js), fs, o.limit, func(r []jobRow) error { return writeJobs(a.stdout, r) }); err != nil {
			return usagef("%v", err)
		}
	case "placement-groups":
		gs, err := c.PlacementGroups(gctx)
		if err != nil {
			return err
		}
		if l, err = page(placementGroupRows(gs), fs, o.limit, func(r []placementGroupRow) error { return writePlacementGroups(a.stdout, r) }); err != nil {
			return usagef("%v", err)
		}
	default:
		return usagef("cannot list %q: use one of %s", kind, strings.Join(listKinds, ", "))
	}
	if l.truncated {
		fmt.Fprintf(a.stderr, "note: showing %d of %d %s; use --limit to see more, --filter to narrow\n", reflect.ValueOf(l.rows).Len(), l.total, kind)
	}
	dropped := a.historyDropped(gctx, c, kind)
	if dropped != nil && dropped.b.Dropped > 0 {
		fmt.Fprintf(a.stderr, "note: %s (the GCS keeps a bounded history: gcs { history { ... } })\n", droppedNote(dropped.what, dropped.b))
	}
	switch {
	case o.asJSON:
		// (How many were dropped is in goray status --json's gcs.history:
		// this object holds the rows only.)
		return writeJSON(a.stdout, map[string]any{strings.ReplaceAll(kind, "-", "_"): l.rows})
	case o.detail:
		return writeDetail(a.stdout, l.rows)
	}
	return l.write()
}

// listedHistory is the GCS's history of a listed kind.
type listedHistory struct {
	what string
	b    historyBound
}

// historyDropped asks the GCS how many of kind it dropped past its cap
// (nil for a kind it keeps no history of, or a GCS that does not say).
func (a *app) historyDropped(ctx context.Context, c cluster, kind string) *listedHistory {
	if kind == "tasks" { // (said already, with the task events' own counts)
		return nil
	}
	for _, k := range historyKinds {
		if k.list != kind {
			continue
		}
		info, err := c.ClusterInfo(ctx)
		if err != nil || info.GetHistory() == nil {
			return nil
		}
		b := k.of(info.GetHistory())
		return &listedHistory{what: k.what, b: historyBound{Kept: b.GetKept(), Cap: b.GetCap(), Dropped: b.GetDropped()}}
	}
	return nil
}

func (a *app) listCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list " + strings.Join(listKinds, "|"),
		Short: "List the cluster's nodes, jobs, actors, tasks, objects, placement groups or workers",
		Long: "List nodes, jobs, actors and placement groups from the GCS, tasks from the task events the GCS keeps, and\n" +
			"objects and workers from every alive node's raylet (over its TCP address, so any machine sees every node).",
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return usagef("say what to list: %s", strings.Join(listKinds, ", "))
		}),
	}
	for _, kind := range listKinds {
		var f clusterFlags
		var o listOptions
		sub := &cobra.Command{
			Use:   kind,
			Short: "List " + kind,
			Args:  cobra.NoArgs,
			RunE: runE(func(cmd *cobra.Command, args []string) error {
				c, err := a.connect(&f)
				if err != nil {
					return err
				}
				defer c.Close()
				o.asJSON = f.asJSON
				return a.list(cmd.Context(), c, kind, o)
			}),
		}
		f.register(sub)
		o.register(sub)
		cmd.AddCommand(sub)
	}
	return cmd
}
