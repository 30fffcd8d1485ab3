package gcs

import (
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/goray-dev/goray/gcs/internal/store"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// historyKindCase drives one kind of the history through a GCS's API.
type historyKindCase struct {
	name  string
	table string
	// setCap sets the kind's cap.
	setCap func(l *HistoryLimits, n int)
	// create makes a live one; end ends it (dies, finishes, is removed).
	create func(t *testing.T, c gorayv1.GcsClient) ids.ID
	end    func(t *testing.T, c gorayv1.GcsClient, id ids.ID)
	// list is every one the GCS lists, in its order.
	list  func(t *testing.T, c gorayv1.GcsClient) []ids.ID
	bound func(h *gorayv1.History) *gorayv1.HistoryBound
	// rejoin brings live ones back after a restart (nodes register
	// again: until then views leave them out).
	rejoin func(t *testing.T, c gorayv1.GcsClient, cluster string, live []ids.ID)
}

var historyCases = []historyKindCase{
	{
		name: "dead nodes", table: tableNodes,
		setCap: func(l *HistoryLimits, n int) { l.DeadNodes = n },
		create: func(t *testing.T, c gorayv1.GcsClient) ids.ID {
			id := newID()
			registerNode(t, c, id, "n")
			return id
		},
		end: func(t *testing.T, c gorayv1.GcsClient, id ids.ID) {
			_, err := c.UnregisterNode(ctxT(t), &gorayv1.UnregisterNodeRequest{NodeId: id.Bytes(), Reason: "scaled down"})
			mustOK(t, err)
		},
		list: func(t *testing.T, c gorayv1.GcsClient) []ids.ID {
			r, err := c.GetAllNodes(ctxT(t), &gorayv1.GetAllNodesRequest{})
			mustOK(t, err)
			var out []ids.ID
			for _, n := range r.GetNodes() {
				out = append(out, ids.MustFromBytes(n.GetInfo().GetNodeId()))
			}
			return out
		},
		bound: func(h *gorayv1.History) *gorayv1.HistoryBound { return h.GetDeadNodes() },
		rejoin: func(t *testing.T, c gorayv1.GcsClient, cluster string, live []ids.ID) {
			for _, id := range live {
				_, err := c.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: nodeInfo(id, "n"), ClusterId: cluster})
				mustOK(t, err)
			}
		},
	},
	{
		name: "dead actors", table: tableActors,
		setCap: func(l *HistoryLimits, n int) { l.DeadActors = n },
		create: func(t *testing.T, c gorayv1.GcsClient) ids.ID {
			id := newID()
			registerActor(t, c, actorOn(id, historyJob, ids.Nil, ids.Nil, "a"+id.Short()))
			return id
		},
		end: func(t *testing.T, c gorayv1.GcsClient, id ids.ID) { setState(t, c, id, dead, "done") },
		list: func(t *testing.T, c gorayv1.GcsClient) []ids.ID {
			r, err := c.ListActors(ctxT(t), &gorayv1.ListActorsRequest{})
			mustOK(t, err)
			var out []ids.ID
			for _, a := range r.GetActors() {
				out = append(out, ids.MustFromBytes(a.GetActorId()))
			}
			return out
		},
		bound: func(h *gorayv1.History) *gorayv1.HistoryBound { return h.GetDeadActors() },
	},
	{
		name: "finished jobs", table: tableJobs,
		setCap: func(l *HistoryLimits, n int) { l.FinishedJobs = n },
		create: func(t *testing.T, c gorayv1.GcsClient) ids.ID {
			id := newID()
			addJob(t, c, id)
			return id
		},
		end: func(t *testing.T, c gorayv1.GcsClient, id ids.ID) {
			_, err := c.MarkJobFinished(ctxT(t), &gorayv1.MarkJobFinishedRequest{JobId: id.Bytes()})
			mustOK(t, err)
		},
		list: func(t *testing.T, c gorayv1.GcsClient) []ids.ID {
			r, err := c.GetAllJobs(ctxT(t), &gorayv1.GetAllJobsRequest{})
			mustOK(t, err)
			var out []ids.ID
			for _, j := range r.GetJobs() {
				if id := ids.MustFromBytes(j.GetJobId()); id != historyJob {
					out = append(out, id)
				}
			}
			return out
		},
		bound: func(h *gorayv1.History) *gorayv1.HistoryBound { return h.GetFinishedJobs() },
	},
	{
		name: "removed placement groups", table: tableGroups,
		setCap: func(l *HistoryLimits, n int) { l.RemovedPlacementGroups = n },
		create: func(t *testing.T, c gorayv1.GcsClient) ids.ID {
			id := newID()
			_, err := c.CreatePlacementGroup(ctxT(t), &gorayv1.CreatePlacementGroupRequest{Group: &gorayv1.PlacementGroupInfo{
				PlacementGroupId: id.Bytes(), JobId: historyJob.Bytes(), Bundles: bundlesOf(1)}})
			mustOK(t, err)
			return id
		},
		end: func(t *testing.T, c gorayv1.GcsClient, id ids.ID) {
			_, err := c.RemovePlacementGroup(ctxT(t), &gorayv1.RemovePlacementGroupRequest{PlacementGroupId: id.Bytes()})
			mustOK(t, err)
		},
		list: func(t *testing.T, c gorayv1.GcsClient) []ids.ID {
			r, err := c.ListPlacementGroups(ctxT(t), &gorayv1.ListPlacementGroupsRequest{})
			mustOK(t, err)
			var out []ids.ID
			for _, g := range r.GetGroups() {
				out = append(out, ids.MustFromBytes(g.GetPlacementGroupId()))
			}
			return out
		},
		bound: func(h *gorayv1.History) *gorayv1.HistoryBound { return h.GetRemovedPlacementGroups() },
	},
}

// historyJob is the running job the actors and groups of the tests belong
// to.
var historyJob = ids.MustFromBytes([]byte("history-job-0001"))

// storedKeys is every key of table in st.
func storedKeys(t *testing.T, st store.Store, table string) []string {
	t.Helper()
	recs, err := st.GetAll(ctxT(t), table)
	mustOK(t, err)
	return slices.Sorted(maps.Keys(recs))
}

func idStrings(xs []ids.ID) []string {
	out := make([]string, 0, len(xs))
	for _, id := range xs {
		out = append(out, id.String())
	}
	slices.Sort(out)
	return out
}

// TestHistoryCaps: for each kind, a GCS keeps exactly its cap of ended
// ones, the ones that ended first are dropped, the live ones never, the
// storage holds exactly what memory holds, and the count of dropped ones
// is reported and kept; a GCS opened again on the storage with a smaller
// cap drops the excess as it restores, from the storage too, and goes on
// counting.
func TestHistoryCaps(t *testing.T) {
	const capN, extra, alive = 3, 4, 2
	for _, tc := range historyCases {
		t.Run(tc.name, func(t *testing.T) {
			st := keepOpen{store.NewMemory()}
			clock := newFakeClock()
			opts := Options{Now: clock.Now}
			tc.setCap(&opts.History, capN)
			s1, err := openOn(ctxT(t), opts, st)
			mustOK(t, err)
			c1, stop1 := serveOpened(t, s1)
			addJob(t, c1, historyJob)

			var live, ended []ids.ID
			for range alive {
				live = append(live, tc.create(t, c1))
			}
			for range capN + extra {
				id := tc.create(t, c1)
				clock.Advance(time.Millisecond) // (end times in order)
				tc.end(t, c1, id)
				ended = append(ended, id)
			}
			want := append(slices.Clone(live), ended[extra:]...)
			if got := tc.list(t, c1); !slices.Equal(idStrings(got), idStrings(want)) {
				t.Fatalf("listed %d (%v), want the %d live ones and the %d that ended last (%v)", len(got), idStrings(got), alive, capN, idStrings(want))
			}
			b := tc.bound(s1.History())
			if b.GetKept() != capN || b.GetCap() != capN || b.GetDropped() != extra {
				t.Fatalf("history = %v, want kept %d, cap %d, dropped %d", b, capN, capN, extra)
			}
			info, err := c1.GetClusterInfo(ctxT(t), &gorayv1.GetClusterInfoRequest{})
			mustOK(t, err)
			if got := tc.bound(info.GetHistory()).GetDropped(); got != extra {
				t.Fatalf("GetClusterInfo's history says %d dropped, want %d", got, extra)
			}
			stop1()
			keys := storedKeys(t, st, tc.table)
			if tc.table == tableJobs {
				keys = slices.DeleteFunc(keys, func(k string) bool { return k == historyJob.String() })
			}
			if !slices.Equal(keys, idStrings(want)) {
				t.Fatalf("the storage holds %v, memory %v", keys, idStrings(want))
			}

			// Restart with a cap of 2: the oldest kept one goes at the restore.
			tc.setCap(&opts.History, 2)
			s2, err := openOn(ctxT(t), opts, st)
			mustOK(t, err)
			c2, stop2 := serveOpened(t, s2)
			if tc.rejoin != nil {
				tc.rejoin(t, c2, s2.ClusterID(), live)
			}
			want = append(slices.Clone(live), ended[extra+1:]...)
			if got := tc.list(t, c2); !slices.Equal(idStrings(got), idStrings(want)) {
				t.Fatalf("after a restart with cap 2: listed %v, want %v", idStrings(got), idStrings(want))
			}
			if b := tc.bound(s2.History()); b.GetKept() != 2 || b.GetDropped() != extra+1 {
				t.Fatalf("after a restart with cap 2: history = %v, want kept 2, dropped %d", b, extra+1)
			}
			// And it goes on: one more ends, the oldest goes.
			id := tc.create(t, c2)
			clock.Advance(time.Millisecond)
			tc.end(t, c2, id)
			want = append(slices.Clone(live), ended[extra+2:]...)
			want = append(want, id)
			if got := tc.list(t, c2); !slices.Equal(idStrings(got), idStrings(want)) {
				t.Fatalf("after one more ended: listed %v, want %v", idStrings(got), idStrings(want))
			}
			stop2()
			keys = storedKeys(t, st, tc.table)
			if tc.table == tableJobs {
				keys = slices.DeleteFunc(keys, func(k string) bool { return k == historyJob.String() })
			}
			if !slices.Equal(keys, idStrings(want)) {
				t.Fatalf("after the restart the storage holds %v, memory %v", keys, idStrings(want))
			}
			meta, err := st.GetAll(ctxT(t), tableMeta)
			mustOK(t, err)
			var k historyKind
			for i, hk := range historyKinds {
				if hk.table == tc.table {
					k = historyKind(i)
				}
			}
			if got := string(meta[historyKinds[k].metaKey]); got != strconv.Itoa(extra+2) {
				t.Fatalf("the storage counts %q dropped, want %d", got, extra+2)
			}
		})
	}
}

// TestHistoryKeepsReferencedJobs: a finished job a live (detached) actor
// belongs to is never dropped, whatever the cap; once the actor dies it
// goes.
func TestHistoryKeepsReferencedJobs(t *testing.T) {
	clock := newFakeClock()
	s, c := startServer(t, Options{Now: clock.Now, History: HistoryLimits{FinishedJobs: 1}})
	first := newID()
	addJob(t, c, first)
	actor := newID()
	a := actorOn(actor, first, ids.Nil, ids.Nil, "keeper")
	a.Detached = true
	registerActor(t, c, a)
	setState(t, c, actor, gorayv1.ActorState_ACTOR_STATE_ALIVE, "")
	_, err := c.MarkJobFinished(ctxT(t), &gorayv1.MarkJobFinishedRequest{JobId: first.Bytes()})
	mustOK(t, err)
	var later []ids.ID
	for range 3 {
		clock.Advance(time.Millisecond)
		id := newID()
		addJob(t, c, id)
		_, err := c.MarkJobFinished(ctxT(t), &gorayv1.MarkJobFinishedRequest{JobId: id.Bytes()})
		mustOK(t, err)
		later = append(later, id)
	}
	jobs := historyCases[2].list(t, c)
	if !slices.Contains(jobs, first) {
		t.Fatalf("the finished job of a live detached actor was dropped: %v", idStrings(jobs))
	}
	if !slices.Contains(jobs, later[2]) || slices.Contains(jobs, later[0]) || slices.Contains(jobs, later[1]) {
		t.Fatalf("listed %v: want the referenced job and the last finished one only", idStrings(jobs))
	}
	// The job still refuses new actors (it is known finished).
	_, err = c.RegisterActor(ctxT(t), &gorayv1.RegisterActorRequest{Actor: actorOn(newID(), first, ids.Nil, ids.Nil, "")})
	if err == nil {
		t.Fatal("a finished job kept for its detached actor took a new actor")
	}
	// Once its actor is dead, it is the oldest and goes at the next end.
	setState(t, c, actor, dead, "killed")
	clock.Advance(time.Millisecond)
	last := newID()
	addJob(t, c, last)
	_, err = c.MarkJobFinished(ctxT(t), &gorayv1.MarkJobFinishedRequest{JobId: last.Bytes()})
	mustOK(t, err)
	if jobs := historyCases[2].list(t, c); !slices.Equal(idStrings(jobs), idStrings([]ids.ID{last})) {
		t.Fatalf("listed %v, want only the last finished job", idStrings(jobs))
	}
	if b := s.History().GetFinishedJobs(); b.GetDropped() != 4 {
		t.Fatalf("finished jobs dropped = %d, want 4", b.GetDropped())
	}
}

// TestHistoryDeadNodeDroppedFromViews: a versioned refresh whose change
// log names a dead node dropped since is answered without it (no panic).
func TestHistoryDeadNodeDroppedFromViews(t *testing.T) {
	_, c := startServer(t, Options{History: HistoryLimits{DeadNodes: 1}})
	first, err := c.GetAllNodes(ctxT(t), &gorayv1.GetAllNodesRequest{})
	mustOK(t, err)
	var dead []ids.ID
	for range 3 {
		id := historyCases[0].create(t, c)
		historyCases[0].end(t, c, id)
		dead = append(dead, id)
	}
	r, err := c.GetAllNodes(ctxT(t), &gorayv1.GetAllNodesRequest{SinceEpoch: first.GetEpoch(), SinceVersion: first.GetVersion()})
	mustOK(t, err)
	if len(r.GetNodes()) != 1 || ids.MustFromBytes(r.GetNodes()[0].GetInfo().GetNodeId()) != dead[2] {
		t.Fatalf("refresh = %v, want only the last dead node", r.GetNodes())
	}
}

// TestHistoryTaskEventsCap: the history's task_events sets the task event
// store's bound, and History reports its evictions.
func TestHistoryTaskEventsCap(t *testing.T) {
	s := New(Options{History: HistoryLimits{TaskEvents: 7}})
	if got := s.History().GetTaskEvents().GetCap(); got != 7 {
		t.Fatalf("task events cap = %d, want 7", got)
	}
	if got := New(Options{}).History(); got.GetTaskEvents().GetCap() != DefaultMaxTasks || got.GetDeadActors().GetCap() != DefaultMaxDeadActors ||
		got.GetDeadNodes().GetCap() != DefaultMaxDeadNodes {
		t.Fatalf("default caps = %v", got)
	}
}
