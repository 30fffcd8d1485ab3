package ui

import (
	"cmp"
	"encoding/hex"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/goray-dev/goray/dashboard/jobs"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

func hexID(b []byte) string { return hex.EncodeToString(b) }

// NodeRow is one node of the cluster overview.
type NodeRow struct {
	NodeID string `json:"node_id"`
	Name   string `json:"name"`
	IP     string `json:"ip"`
	// State is ALIVE or DEAD.
	State       string `json:"state"`
	IsHead      bool   `json:"is_head"`
	DeathReason string `json:"death_reason,omitempty"`
	// CPUTotal and CPUUsed are logical CPUs (used: held by tasks and
	// actors); MemoryTotal and MemoryUsed the memory resource's bytes.
	CPUTotal    float64 `json:"cpu_total"`
	CPUUsed     float64 `json:"cpu_used"`
	GPUTotal    float64 `json:"gpu_total"`
	GPUUsed     float64 `json:"gpu_used"`
	MemoryTotal int64   `json:"memory_total"`
	MemoryUsed  int64   `json:"memory_used"`
	// StoreUsed and StoreCapacity are the object store's bytes.
	StoreUsed     int64 `json:"store_used"`
	StoreCapacity int64 `json:"store_capacity"`
	StartTimeMs   int64 `json:"start_time_ms"`
}

// nodeRowOf converts a node of the GCS's table.
func nodeRowOf(v *pb.NodeView) NodeRow {
	in := v.GetInfo()
	r := NodeRow{NodeID: hexID(in.GetNodeId()), Name: in.GetNodeName(), State: in.GetState(), IsHead: in.GetIsHead(),
		DeathReason: in.GetDeathReason(), StartTimeMs: in.GetStartTimeMs()}
	if host, _, err := net.SplitHostPort(in.GetRayletTcp()); err == nil {
		r.IP = host
	}
	total := resources.Set(in.GetTotal().GetAmounts())
	avail := resources.Set(v.GetAvailable().GetAmounts())
	r.CPUTotal, r.GPUTotal = total.Get(resources.CPU), total.Get(resources.GPU)
	r.MemoryTotal = int64(total.Get(resources.Memory))
	if r.State == "ALIVE" {
		r.CPUUsed = r.CPUTotal - avail.Get(resources.CPU)
		r.GPUUsed = r.GPUTotal - avail.Get(resources.GPU)
		r.MemoryUsed = r.MemoryTotal - int64(avail.Get(resources.Memory))
		r.StoreUsed, r.StoreCapacity = v.GetStoreUsed(), v.GetStoreCapacity()
		if r.StoreCapacity == 0 { // no heartbeat yet: the store's size is its resource
			r.StoreCapacity = int64(total.Get(resources.ObjectStoreMemory))
		}
	}
	return r
}

// nodeRows converts the GCS's nodes: alive first, the head first, then
// by start time.
func nodeRows(vs []*pb.NodeView) []NodeRow {
	out := []NodeRow{}
	for _, v := range vs {
		out = append(out, nodeRowOf(v))
	}
	slices.SortStableFunc(out, func(a, b NodeRow) int {
		return cmp.Or(cmp.Compare(b2i(a.State != "ALIVE"), b2i(b.State != "ALIVE")), cmp.Compare(b2i(!a.IsHead), b2i(!b.IsHead)),
			cmp.Compare(a.StartTimeMs, b.StartTimeMs), cmp.Compare(a.NodeID, b.NodeID))
	})
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// JobRow is one job: a submitted job (the job API), the driver job it
// registered, or both merged (as Ray's dashboard shows them).
type JobRow struct {
	// JobID is the goray job's id ("" for a submission whose driver has
	// not connected).
	JobID string `json:"job_id"`
	// SubmissionID names a submitted job ("" for a driver started by
	// hand).
	SubmissionID string `json:"submission_id"`
	// Type is SUBMISSION or DRIVER.
	Type string `json:"type"`
	// Status is the submission's (PENDING, RUNNING, SUCCEEDED, FAILED,
	// STOPPED), else the driver job's (RUNNING, FINISHED).
	Status       string `json:"status"`
	Message      string `json:"message,omitempty"`
	Entrypoint   string `json:"entrypoint"`
	DriverPid    int32  `json:"driver_pid"`
	DriverNodeID string `json:"driver_node_id"`
	StartTimeMs  int64  `json:"start_time_ms"`
	EndTimeMs    int64  `json:"end_time_ms,omitempty"`
	// LogsURL is where the submission's driver log is served ("" for a
	// driver job).
	LogsURL string `json:"logs_url,omitempty"`
}

// jobRows merges the submitted jobs and the GCS's driver jobs, oldest
// first.
func jobRows(subs []jobs.Job, drivers []*pb.JobInfo) []JobRow {
	out := []JobRow{}
	byJob := map[string]int{}
	for _, s := range subs {
		r := JobRow{JobID: s.GorayJobID, SubmissionID: s.SubmissionID, Type: "SUBMISSION", Status: string(s.Status), Message: s.Message,
			Entrypoint: strings.TrimSpace("sha256:" + short(s.BinarySHA256) + " " + strings.Join(s.Args, " ")), DriverPid: int32(s.DriverPid),
			StartTimeMs: s.SubmitTime.UnixMilli(), LogsURL: "/api/jobs/" + s.SubmissionID + "/logs"}
		if s.StartTime != nil {
			r.StartTimeMs = s.StartTime.UnixMilli()
		}
		if s.EndTime != nil {
			r.EndTimeMs = s.EndTime.UnixMilli()
		}
		if r.JobID != "" {
			byJob[r.JobID] = len(out)
		}
		out = append(out, r)
	}
	for _, j := range drivers {
		id := hexID(j.GetJobId())
		if i, ok := byJob[id]; ok {
			out[i].DriverNodeID = hexID(j.GetDriverNodeId())
			continue
		}
		out = append(out, JobRow{JobID: id, Type: "DRIVER", Status: j.GetState(), Entrypoint: j.GetBinaryPath(), DriverPid: j.GetDriverPid(),
			DriverNodeID: hexID(j.GetDriverNodeId()), StartTimeMs: j.GetStartTimeMs(), EndTimeMs: j.GetEndTimeMs()})
	}
	slices.SortStableFunc(out, func(a, b JobRow) int {
		return cmp.Or(cmp.Compare(a.StartTimeMs, b.StartTimeMs), cmp.Compare(a.JobID, b.JobID), cmp.Compare(a.SubmissionID, b.SubmissionID))
	})
	return out
}

// ActorRow is one actor.
type ActorRow struct {
	ActorID     string `json:"actor_id"`
	ClassName   string `json:"class_name"`
	Name        string `json:"name"`
	Namespace   string `json:"namespace"`
	Detached    bool   `json:"detached"`
	State       string `json:"state"`
	JobID       string `json:"job_id"`
	NodeID      string `json:"node_id"`
	WorkerID    string `json:"worker_id"`
	Pid         int32  `json:"pid"`
	NumRestarts int32  `json:"num_restarts"`
	MaxRestarts int32  `json:"max_restarts"`
	DeathReason string `json:"death_reason,omitempty"`
	StartTimeMs int64  `json:"start_time_ms"`
	EndTimeMs   int64  `json:"end_time_ms,omitempty"`
	// LogsURL serves the stdout of the actor's worker ("" while it has
	// none).
	LogsURL string `json:"logs_url,omitempty"`
}

func actorRows(as []*pb.ActorInfo) []ActorRow {
	out := []ActorRow{}
	for _, a := range as {
		r := ActorRow{ActorID: hexID(a.GetActorId()), ClassName: a.GetClassName(), Name: a.GetName(), Namespace: a.GetNamespace(), Detached: a.GetDetached(),
			State: strings.TrimPrefix(a.GetState().String(), "ACTOR_STATE_"), JobID: hexID(a.GetJobId()),
			NodeID: hexID(a.GetAddress().GetNodeId()), WorkerID: hexID(a.GetAddress().GetWorkerId()), Pid: a.GetPid(),
			NumRestarts: a.GetNumRestarts(), MaxRestarts: a.GetMaxRestarts(), DeathReason: a.GetDeathReason(),
			StartTimeMs: a.GetStartTimeMs(), EndTimeMs: a.GetEndTimeMs()}
		if r.NodeID != "" && r.WorkerID != "" {
			r.LogsURL = workerLogURL(r.NodeID, r.WorkerID)
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b ActorRow) int {
		return cmp.Or(cmp.Compare(a.StartTimeMs, b.StartTimeMs), cmp.Compare(a.ActorID, b.ActorID))
	})
	return out
}

// PlacementGroupRow is one placement group.
type PlacementGroupRow struct {
	PlacementGroupID string `json:"placement_group_id"`
	Name             string `json:"name"`
	JobID            string `json:"job_id"`
	Strategy         string `json:"strategy"`
	State            string `json:"state"`
	// Bundles describes each bundle and where it is: "{CPU: 1}@1a2b3c4d".
	Bundles       []string `json:"bundles"`
	PendingReason string   `json:"pending_reason,omitempty"`
	CreateTimeMs  int64    `json:"create_time_ms"`
}

func placementGroupRows(gs []*pb.PlacementGroupInfo) []PlacementGroupRow {
	out := []PlacementGroupRow{}
	for _, g := range gs {
		r := PlacementGroupRow{PlacementGroupID: hexID(g.GetPlacementGroupId()), Name: g.GetName(), JobID: hexID(g.GetJobId()),
			Strategy: strings.TrimPrefix(g.GetStrategy().String(), "PLACEMENT_STRATEGY_"),
			State:    strings.TrimPrefix(g.GetState().String(), "PLACEMENT_GROUP_STATE_"),
			Bundles:  []string{}, PendingReason: g.GetPendingReason(), CreateTimeMs: g.GetCreateTimeMs()}
		for _, b := range g.GetBundles() {
			where := "-"
			if len(b.GetNodeId()) > 0 {
				where = short(hexID(b.GetNodeId()))
			}
			r.Bundles = append(r.Bundles, resources.Set(b.GetResources().GetAmounts()).String()+"@"+where)
		}
		out = append(out, r)
	}
	return out
}

// PluginRow is one plugin of one node.
type PluginRow struct {
	NodeID    string `json:"node_id"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Version   string `json:"version"`
	State     string `json:"state"`
	Restarts  int32  `json:"restarts"`
	Pid       int32  `json:"pid"`
	LastError string `json:"last_error,omitempty"`
}

// short is the first 8 characters of an id.
func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	if s == "" {
		return "-"
	}
	return s
}

// clock formats Unix milliseconds as a local time ("-" for none).
func clock(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return time.UnixMilli(ms).Format("2006-01-02 15:04:05")
}
