package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/goray-dev/goray/autoscaler"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// statusReport is the data of `goray status`; its JSON form is the output
// of `goray status --json`.
type statusReport struct {
	GCSAddress string `json:"gcs_address"`
	// GCS describes the GCS itself: its storage, health and uptime.
	GCS        gcsStatus `json:"gcs"`
	AliveNodes int       `json:"alive_nodes"`
	DeadNodes  int       `json:"dead_nodes"`
	// Nodes are sorted: alive first, the head first among them.
	Nodes []nodeStatus `json:"nodes"`
	// Cluster sums the alive nodes.
	Cluster clusterResources `json:"cluster"`
	// PendingDemand merges the alive nodes' demand by resource shape.
	PendingDemand []demand   `json:"pending_demand"`
	Jobs          jobCounts  `json:"jobs"`
	Actors        actorCount `json:"actors"`
	// PlacementGroups counts the groups by state; PendingGroups are those
	// waiting for room (pending demand), infeasible ones flagged.
	PlacementGroups groupCounts    `json:"placement_groups"`
	PendingGroups   []pendingGroup `json:"pending_placement_groups"`
	// Autoscaler is the status the cluster's autoscaler last published,
	// as it published it; omitted when there is none (a cluster started
	// with `goray start` has no autoscaler).
	Autoscaler *autoscaler.Status `json:"autoscaler,omitempty"`
	// AutoscalerStale says that status is older than three autoscaler
	// rounds (by the GCS's clock): the autoscaler may not be running.
	AutoscalerStale bool `json:"autoscaler_stale,omitempty"`
	// AutoscalerError says why the autoscaler's status could not be read
	// (the rest of the report stands).
	AutoscalerError string `json:"autoscaler_error,omitempty"`
	// ResourceRequest is the standing ray.RequestResources request, as
	// stored in the GCS's KV (autoscaler.RequestsKey); omitted when none
	// is. Without an autoscaler nothing acts on it, and status says so.
	ResourceRequest []autoscaler.Request `json:"resource_request,omitempty"`
	// ResourceRequestError says why the request could not be read.
	ResourceRequestError string `json:"resource_request_error,omitempty"`

	// asOf is when the report was made, by the GCS's clock when it says
	// (the autoscaler runs on the head too); ages are counted from it.
	asOf time.Time
}

// gcsStatus is the GCS part of `goray status`.
type gcsStatus struct {
	ClusterID string `json:"cluster_id"`
	// Storage is the backend and where it keeps data; StorageError is
	// empty when it answers.
	Storage      string `json:"storage"`
	StorageError string `json:"storage_error,omitempty"`
	Healthy      bool   `json:"healthy"`
	// StartedAtMs is when the GCS started serving; UptimeSeconds how long
	// ago that was by the GCS's clock.
	StartedAtMs   int64   `json:"started_at_ms"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	// Restored says the GCS read the cluster back from its storage.
	Restored bool  `json:"restored"`
	Pid      int64 `json:"pid"`
	// StorageSetAside counts the records of the storage that failed their
	// checks when a GCS read the cluster back, kept in its quarantine
	// table for an operator (docs/security.md).
	StorageSetAside int64 `json:"storage_set_aside"`
	// NodesReconnecting counts the nodes the GCS read back as alive that
	// have not registered with it again yet (not shown among the nodes).
	NodesReconnecting int64 `json:"nodes_reconnecting"`
	// History is the GCS's bounded history by kind (dead_nodes,
	// dead_actors, finished_jobs, removed_placement_groups, task_events):
	// how many it keeps, its cap and how many it dropped.
	History map[string]historyBound `json:"history,omitempty"`
}

// historyBound is one kind of the GCS's bounded history.
type historyBound struct {
	Kept    int64 `json:"kept"`
	Cap     int64 `json:"cap"`
	Dropped int64 `json:"dropped"`
}

// historyKinds are the kinds of the GCS's history: the JSON key, what
// they are called, the list kind they belong to, and their bound in a
// reply.
var historyKinds = []struct {
	key, what, list string
	of              func(*pb.History) *pb.HistoryBound
}{
	{"dead_nodes", "dead nodes", "nodes", (*pb.History).GetDeadNodes},
	{"dead_actors", "dead actors", "actors", (*pb.History).GetDeadActors},
	{"finished_jobs", "finished jobs", "jobs", (*pb.History).GetFinishedJobs},
	{"removed_placement_groups", "removed placement groups", "placement-groups", (*pb.History).GetRemovedPlacementGroups},
	{"task_events", "task attempts", "tasks", (*pb.History).GetTaskEvents},
}

func historyOf(h *pb.History) map[string]historyBound {
	if h == nil {
		return nil
	}
	out := map[string]historyBound{}
	for _, k := range historyKinds {
		b := k.of(h)
		out[k.key] = historyBound{Kept: b.GetKept(), Cap: b.GetCap(), Dropped: b.GetDropped()}
	}
	return out
}

// droppedNote says how many of a kind the GCS dropped ("1,234 dead
// actors dropped, oldest first; cap 100,000").
func droppedNote(what string, b historyBound) string {
	return fmt.Sprintf("%s %s dropped, oldest first; cap %s", humanize.Comma(b.Dropped), what, humanize.Comma(b.Cap))
}

func gcsStatusOf(r *pb.GetClusterInfoReply) gcsStatus {
	return gcsStatus{
		ClusterID: r.GetClusterId(), Storage: r.GetStorage(), StorageError: r.GetStorageError(), Healthy: r.GetStorageError() == "",
		StartedAtMs: r.GetStartedAtMs(), UptimeSeconds: float64(max(r.GetNowMs()-r.GetStartedAtMs(), 0)) / 1000,
		Restored: r.GetRestored(), Pid: r.GetPid(),
		StorageSetAside: r.GetStorageSetAside(), NodesReconnecting: r.GetNodesReconnecting(),
		History: historyOf(r.GetHistory()),
	}
}

// writeGCSLine renders the GCS's storage, health and uptime.
func writeGCSLine(w io.Writer, g gcsStatus) {
	health := "healthy"
	if !g.Healthy {
		health = "STORAGE FAILING: " + g.StorageError
	}
	up := time.Duration(g.UptimeSeconds * float64(time.Second)).Round(time.Second)
	restored := ""
	if g.Restored {
		restored = ", restored from storage"
	}
	fmt.Fprintf(w, "GCS: cluster %s, up %s%s; storage %s (%s)\n", shortHex(g.ClusterID), up, restored, g.Storage, health)
	if n := g.StorageSetAside; n > 0 {
		fmt.Fprintf(w, "storage: %s set aside (failed their checks when the GCS read them back; kept in its quarantine table: see docs/security.md)\n", plural(int(n), "record", "records"))
	}
	if n := g.NodesReconnecting; n > 0 {
		fmt.Fprintf(w, "GCS: waiting for %s read back from storage to register again (not dialled nor listed until then)\n", plural(int(n), "node", "nodes"))
	}
	for _, k := range historyKinds {
		if b := g.History[k.key]; b.Dropped > 0 {
			fmt.Fprintf(w, "history: (%s)\n", droppedNote(k.what, b))
		}
	}
}

// nodeStatus is one node of status and `list nodes`.
type nodeStatus struct {
	NodeID              string            `json:"node_id"`
	NodeName            string            `json:"node_name"`
	Hostname            string            `json:"hostname,omitempty"`
	State               string            `json:"state"`
	IsHead              bool              `json:"is_head"`
	DeathReason         string            `json:"death_reason,omitempty"`
	Pid                 int32             `json:"pid"`
	RayletSocket        string            `json:"raylet_socket,omitempty"`
	RayletTCP           string            `json:"raylet_tcp,omitempty"`
	SessionDir          string            `json:"session_dir,omitempty"`
	Labels              map[string]string `json:"labels,omitempty"`
	StartTimeMs         int64             `json:"start_time_ms"`
	EndTimeMs           int64             `json:"end_time_ms,omitempty"`
	LastHeartbeatMs     int64             `json:"last_heartbeat_ms,omitempty"`
	ResourcesTotal      amounts           `json:"resources_total"`
	ResourcesAvailable  amounts           `json:"resources_available"`
	ObjectStoreUsed     int64             `json:"object_store_used"`
	ObjectStoreCapacity int64             `json:"object_store_capacity"`
	PendingDemand       []demand          `json:"pending_demand"`
	Spill               *spillStatus      `json:"spill,omitempty"`
	// Memory is the node's memory monitor (memorystatus.go); nil when off.
	Memory *memoryStatus `json:"memory_monitor,omitempty"`
	// MetricsAddress is the node's Prometheus endpoint ("": off).
	MetricsAddress string `json:"metrics_address,omitempty"`
}

// spillStatus is a node's spilling to storage.
type spillStatus struct {
	Location        string  `json:"location"`
	SpilledBytes    int64   `json:"spilled_bytes"`
	SpilledObjects  int64   `json:"spilled_objects"`
	RestoredBytes   int64   `json:"restored_bytes"`
	RestoredObjects int64   `json:"restored_objects"`
	SpillSeconds    float64 `json:"spill_seconds"`
	RestoreSeconds  float64 `json:"restore_seconds"`
	StoredObjects   int64   `json:"stored_objects"`
	StoredBytes     int64   `json:"stored_bytes"`
	Files           int64   `json:"files"`
	Failing         string  `json:"failing,omitempty"`
}

func spillStatusOf(s *pb.SpillStats) *spillStatus {
	if s == nil {
		return nil
	}
	return &spillStatus{
		Location: s.GetLocation(), SpilledBytes: s.GetSpilledBytes(), SpilledObjects: s.GetSpilledObjects(),
		RestoredBytes: s.GetRestoredBytes(), RestoredObjects: s.GetRestoredObjects(), SpillSeconds: s.GetSpillSeconds(),
		RestoreSeconds: s.GetRestoreSeconds(), StoredObjects: s.GetStoredObjects(), StoredBytes: s.GetStoredBytes(),
		Files: s.GetFiles(), Failing: s.GetFailing(),
	}
}

// rate formats bytes per second of busy time.
func rate(bytes int64, secs float64) string {
	if secs <= 0 || bytes <= 0 {
		return "-"
	}
	return humanize.IBytes(uint64(float64(bytes)/secs)) + "/s"
}

// clusterResources sums resources over alive nodes.
type clusterResources struct {
	ResourcesTotal      amounts `json:"resources_total"`
	ResourcesAvailable  amounts `json:"resources_available"`
	ObjectStoreUsed     int64   `json:"object_store_used"`
	ObjectStoreCapacity int64   `json:"object_store_capacity"`
}

// demand is resource requests of one shape waiting for a worker.
type demand struct {
	Resources  amounts `json:"resources"`
	Count      int     `json:"count"`
	Infeasible bool    `json:"infeasible"`
}

type jobCounts struct {
	Total    int `json:"total"`
	Running  int `json:"running"`
	Finished int `json:"finished"`
}

type actorCount struct {
	Total      int `json:"total"`
	Pending    int `json:"pending"`
	Alive      int `json:"alive"`
	Restarting int `json:"restarting"`
	Dead       int `json:"dead"`
}

// stateAlive is NodeInfo.state of a live node.
const stateAlive = "ALIVE"

func nodeStatusOf(v *pb.NodeView) nodeStatus {
	in := v.GetInfo()
	ns := nodeStatus{
		NodeID: hexID(in.GetNodeId()), NodeName: in.GetNodeName(), Hostname: in.GetHostname(),
		State: in.GetState(), IsHead: in.GetIsHead(), DeathReason: in.GetDeathReason(), Pid: in.GetPid(),
		RayletSocket: in.GetRayletUnix(), RayletTCP: in.GetRayletTcp(), SessionDir: in.GetSessionDir(),
		Labels: in.GetLabels(), StartTimeMs: in.GetStartTimeMs(), EndTimeMs: in.GetEndTimeMs(),
		LastHeartbeatMs: v.GetLastHeartbeatMs(), ResourcesTotal: amountsOf(in.GetTotal()),
		ResourcesAvailable: amounts{}, PendingDemand: []demand{}, MetricsAddress: in.GetMetricsAddr(),
	}
	if ns.State == stateAlive {
		ns.ResourcesAvailable = amountsOf(v.GetAvailable())
		ns.ObjectStoreUsed, ns.ObjectStoreCapacity = v.GetStoreUsed(), v.GetStoreCapacity()
		if ns.ObjectStoreCapacity == 0 { // no heartbeat yet: the store's size is its resource
			ns.ObjectStoreCapacity = ns.ResourcesTotal[resources.ObjectStoreMemory] / resources.Unit
		}
		ns.PendingDemand = mergeDemand(v.GetPending())
		ns.Spill = spillStatusOf(v.GetSpill())
		ns.Memory = memoryStatusOf(v.GetMemory())
	}
	return ns
}

// sortNodes orders alive before dead, the head first, then by start time
// and id.
func sortNodes(ns []nodeStatus) {
	slices.SortStableFunc(ns, func(a, b nodeStatus) int {
		if c := cmp.Compare(b2i(a.State != stateAlive), b2i(b.State != stateAlive)); c != 0 {
			return c
		}
		if c := cmp.Compare(b2i(!a.IsHead), b2i(!b.IsHead)); c != 0 {
			return c
		}
		if c := cmp.Compare(a.StartTimeMs, b.StartTimeMs); c != 0 {
			return c
		}
		return cmp.Compare(a.NodeID, b.NodeID)
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// mergeDemand adds up demands of the same shape and feasibility, sorted by
// shape.
func mergeDemand(ps ...[]*pb.PendingDemand) []demand {
	type key struct {
		shape      string
		infeasible bool
	}
	idx := map[key]int{}
	out := []demand{}
	for _, list := range ps {
		for _, p := range list {
			set := amountsOf(p.GetResources())
			k := key{resources.Set(set).Key(), p.GetInfeasible()}
			if i, ok := idx[k]; ok {
				out[i].Count += int(p.GetCount())
				continue
			}
			idx[k] = len(out)
			out = append(out, demand{Resources: set, Count: int(p.GetCount()), Infeasible: p.GetInfeasible()})
		}
	}
	slices.SortStableFunc(out, func(a, b demand) int {
		if c := cmp.Compare(b2i(a.Infeasible), b2i(b.Infeasible)); c != 0 {
			return c
		}
		return cmp.Compare(resources.Set(a.Resources).Key(), resources.Set(b.Resources).Key())
	})
	return out
}

// buildStatus assembles the report from the GCS replies.
func buildStatus(addr string, views []*pb.NodeView, jobs []*pb.JobInfo, actors []*pb.ActorInfo) statusReport {
	r := statusReport{
		GCSAddress:    addr,
		Nodes:         []nodeStatus{},
		Cluster:       clusterResources{ResourcesTotal: amounts{}, ResourcesAvailable: amounts{}},
		PendingGroups: []pendingGroup{},
	}
	var pending [][]*pb.PendingDemand
	for _, v := range views {
		ns := nodeStatusOf(v)
		r.Nodes = append(r.Nodes, ns)
		if ns.State != stateAlive {
			r.DeadNodes++
			continue
		}
		r.AliveNodes++
		resources.Set(r.Cluster.ResourcesTotal).Add(resources.Set(ns.ResourcesTotal))
		resources.Set(r.Cluster.ResourcesAvailable).Add(resources.Set(ns.ResourcesAvailable))
		r.Cluster.ObjectStoreUsed += ns.ObjectStoreUsed
		r.Cluster.ObjectStoreCapacity += ns.ObjectStoreCapacity
		pending = append(pending, v.GetPending())
	}
	sortNodes(r.Nodes)
	r.PendingDemand = mergeDemand(pending...)
	for _, j := range jobs {
		r.Jobs.Total++
		if j.GetState() == "FINISHED" {
			r.Jobs.Finished++
		} else {
			r.Jobs.Running++
		}
	}
	for _, a := range actors {
		r.Actors.Total++
		switch a.GetState() {
		case pb.ActorState_ACTOR_STATE_ALIVE:
			r.Actors.Alive++
		case pb.ActorState_ACTOR_STATE_DEAD:
			r.Actors.Dead++
		case pb.ActorState_ACTOR_STATE_RESTARTING:
			r.Actors.Restarting++
		default:
			r.Actors.Pending++
		}
	}
	return r
}

// cell formats available/total of one resource.
func cell(name string, avail, total amounts) string {
	return formatAmount(name, avail[name]) + "/" + formatAmount(name, total[name])
}

// writeStatus renders the report as text.
func writeStatus(w io.Writer, r statusReport) error {
	fmt.Fprintf(w, "goray cluster at %s: %s alive, %d dead\n", r.GCSAddress, plural(r.AliveNodes, "node", "nodes"), r.DeadNodes)
	writeGCSLine(w, r.GCS)
	fmt.Fprintln(w)

	anyDead := r.DeadNodes > 0
	header := []string{"NODE", "NAME", "STATE", "HEAD", "CPU", "GPU", "MEMORY", "OBJECT STORE", "CUSTOM"}
	if anyDead {
		header = append(header, "DEATH REASON")
	}
	t := newTable(w, header...)
	for _, n := range r.Nodes {
		head := ""
		if n.IsHead {
			head = "*"
		}
		row := []string{shortHex(n.NodeID), orDash(n.NodeName), n.State, head}
		if n.State == stateAlive {
			var custom []string
			for _, k := range customNames(withoutGroups(n.ResourcesTotal), withoutGroups(n.ResourcesAvailable)) {
				custom = append(custom, k+" "+cell(k, n.ResourcesAvailable, n.ResourcesTotal))
			}
			row = append(row,
				cell(resources.CPU, n.ResourcesAvailable, n.ResourcesTotal),
				cell(resources.GPU, n.ResourcesAvailable, n.ResourcesTotal),
				cell(resources.Memory, n.ResourcesAvailable, n.ResourcesTotal),
				humanize.IBytes(uint64(max(n.ObjectStoreUsed, 0)))+" used of "+humanize.IBytes(uint64(max(n.ObjectStoreCapacity, 0))),
				orDash(strings.Join(custom, ", ")))
		} else {
			row = append(row, "-", "-", "-", "-", "-")
		}
		if anyDead {
			row = append(row, orDash(n.DeathReason))
		}
		t.row(row...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "(resources are shown as available/total)")

	c := r.Cluster
	fmt.Fprintln(w, "\nCluster resources (available / total):")
	t = newTable(w)
	names := resourceNames(amounts{resources.CPU: 0, resources.GPU: 0, resources.Memory: 0, resources.ObjectStoreMemory: 0}, withoutGroups(c.ResourcesTotal), withoutGroups(c.ResourcesAvailable))
	for _, k := range names {
		t.row("  "+k, formatAmount(k, c.ResourcesAvailable[k])+" / "+formatAmount(k, c.ResourcesTotal[k]))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "Object store: %s used of %s\n", humanize.IBytes(uint64(max(c.ObjectStoreUsed, 0))), humanize.IBytes(uint64(max(c.ObjectStoreCapacity, 0))))

	for _, n := range r.Nodes {
		sp := n.Spill
		if sp == nil {
			continue
		}
		fmt.Fprintf(w, "Spilling on %s to %s: %d objects (%s) spilled at %s, %d (%s) restored at %s; %d objects (%s) stored in %d files\n",
			shortHex(n.NodeID), sp.Location, sp.SpilledObjects, humanize.IBytes(uint64(sp.SpilledBytes)), rate(sp.SpilledBytes, sp.SpillSeconds),
			sp.RestoredObjects, humanize.IBytes(uint64(sp.RestoredBytes)), rate(sp.RestoredBytes, sp.RestoreSeconds),
			sp.StoredObjects, humanize.IBytes(uint64(sp.StoredBytes)), sp.Files)
		if sp.Failing != "" {
			fmt.Fprintf(w, "  SPILLING FAILING (retrying): %s\n", sp.Failing)
		}
	}

	writeMemoryLines(w, r)

	fmt.Fprintln(w, "\nPending demand:")
	if len(r.PendingDemand) == 0 && len(r.PendingGroups) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, d := range r.PendingDemand {
		line := fmt.Sprintf("  {%s} x %d", formatSet(d.Resources), d.Count)
		if d.Infeasible {
			line += " (infeasible: no node can ever provide it)"
		}
		fmt.Fprintln(w, line)
	}
	writePendingGroups(w, r.PendingGroups)

	fmt.Fprintf(w, "\nJobs: %d (%d running, %d finished)\n", r.Jobs.Total, r.Jobs.Running, r.Jobs.Finished)
	restarting := ""
	if r.Actors.Restarting > 0 {
		restarting = fmt.Sprintf(", %d restarting", r.Actors.Restarting)
	}
	fmt.Fprintf(w, "Actors: %d (%d alive, %d pending%s, %d dead)\n", r.Actors.Total, r.Actors.Alive, r.Actors.Pending, restarting, r.Actors.Dead)
	g := r.PlacementGroups
	rescheduling := ""
	if g.Rescheduling > 0 {
		rescheduling = fmt.Sprintf(", %d rescheduling", g.Rescheduling)
	}
	if _, err := fmt.Fprintf(w, "Placement groups: %d (%d created, %d pending%s, %d removed)\n", g.Total, g.Created, g.Pending, rescheduling, g.Removed); err != nil {
		return err
	}
	writeMetricsLine(w, r)
	return writeAutoscaler(w, r)
}

// gatherStatus queries the GCS.
func gatherStatus(ctx context.Context, c statusCluster, addr string) (statusReport, error) {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return statusReport{}, err
	}
	jobs, err := c.Jobs(ctx)
	if err != nil {
		return statusReport{}, err
	}
	actors, err := c.Actors(ctx)
	if err != nil {
		return statusReport{}, err
	}
	groups, err := c.PlacementGroups(ctx)
	if err != nil {
		return statusReport{}, err
	}
	info, err := c.ClusterInfo(ctx)
	switch {
	case status.Code(err) == codes.Unimplemented: // a head older than this command
		info = &pb.GetClusterInfoReply{StorageError: "not reported by this GCS (an older version)"}
	case err != nil:
		return statusReport{}, err
	}
	r := buildStatus(addr, nodes, jobs, actors)
	r.GCS = gcsStatusOf(info)
	r.addPlacementGroups(groups)
	r.asOf = time.Now()
	if ms := info.GetNowMs(); ms > 0 {
		r.asOf = time.UnixMilli(ms)
	}
	value, found, err := c.KVGet(ctx, autoscaler.StatusNamespace, autoscaler.StatusKey)
	r.addAutoscaler(value, found, err)
	value, found, err = c.KVGet(ctx, autoscaler.StatusNamespace, autoscaler.RequestsKey)
	r.addResourceRequest(value, found, err)
	return r, nil
}

// clusterFlags are the flags of commands that query a cluster.
type clusterFlags struct {
	address string
	tempDir string
	asJSON  bool
}

func (f *clusterFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.address, "address", "", "GCS address host:port (default: $"+envAddress+", else the head running under --temp-dir)")
	cmd.Flags().StringVar(&f.tempDir, "temp-dir", defaultTempDir, "where to look for a running head when no address is given")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
}

// connect resolves the address and dials the GCS.
func (a *app) connect(f *clusterFlags) (*grpcCluster, error) {
	addr, err := a.resolveAddress(f.address, absPath(f.tempDir))
	if err != nil {
		return nil, err
	}
	a.log.Debug("connecting", "gcs", addr)
	creds, err := a.clientCreds(absPath(f.tempDir))
	if err != nil {
		return nil, err
	}
	return dialCluster(addr, creds)
}

func (a *app) statusCmd() *cobra.Command {
	var f clusterFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's nodes, resources, demand, jobs, actors, placement groups and autoscaler",
		Args:  cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(&f)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), gcsTimeout)
			defer cancel()
			r, err := gatherStatus(ctx, c, c.addr)
			if err != nil {
				return err
			}
			if f.asJSON {
				return writeJSON(a.stdout, r)
			}
			return writeStatus(a.stdout, r)
		}),
	}
	f.register(cmd)
	return cmd
}
