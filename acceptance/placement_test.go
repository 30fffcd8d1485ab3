package acceptance

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pgStatus is the placement group part of `goray status --json`.
type pgStatus struct {
	Pending []struct {
		PlacementGroupID string               `json:"placement_group_id"`
		Strategy         string               `json:"strategy"`
		Bundles          []map[string]float64 `json:"bundles"`
		Infeasible       bool                 `json:"infeasible"`
		Reason           string               `json:"reason"`
	} `json:"pending_placement_groups"`
}

func groupStatus(ctx context.Context, h *head) (pgStatus, string) {
	r := runGoray(h.t, ctx, "status", "--json", "--temp-dir", h.tempDir)
	var s pgStatus
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &s) != nil {
		return pgStatus{}, ""
	}
	return s, r.stdout
}

// TestPlacementGroupStrategies: on a head and two more nodes each
// strategy lands where it promises, an actor in a bundle runs on its node,
// and removal ends it and gives every resource back.
func TestPlacementGroupStrategies(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	joinNode(t, ctx, h, "127.0.0.2", "")
	joinNode(t, ctx, h, "127.0.0.3", "")
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "pg-strategies")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("pg-strategies exited %d:\n%s", code, out)
	}
	wantLines(t, out, "STRICT_SPREAD: 3 bundles on 3 nodes", "SPREAD: 3 bundles on 3 nodes", "STRICT_PACK: 3 bundles on 1 nodes",
		"PACK: 2 bundles on 1 nodes", "removal ended the actors and freed every resource", "PASS pg-strategies")
	type row struct {
		State    string `json:"state"`
		Strategy string `json:"strategy"`
		Bundles  []struct {
			NodeID string `json:"node_id"`
		} `json:"bundles"`
	}
	r := runGoray(t, ctx, "list", "placement-groups", "--json", "--address", h.addr)
	var doc struct {
		Groups []row `json:"placement_groups"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &doc) != nil {
		t.Fatalf("goray list placement-groups --json: %s", r)
	}
	rows := doc.Groups
	if len(rows) != 4 {
		t.Fatalf("goray list placement-groups: %d groups, want 4: %+v", len(rows), rows)
	}
	for _, r := range rows {
		if r.State != "REMOVED" {
			t.Errorf("group %+v, want REMOVED", r)
		}
	}
}

// TestPlacementGroupWaitsForNode: STRICT_SPREAD with one bundle more than
// there are nodes waits (pending demand in goray status, not infeasible),
// then is created when a node joins.
func TestPlacementGroupWaitsForNode(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	joinNode(t, ctx, h, "127.0.0.2", "")
	joinNode(t, ctx, h, "127.0.0.3", "")
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "pg-wait", dir)
	waitFile(t, j, 30*time.Second, filepath.Join(dir, "pending"))
	waitFor(t, 10*time.Second, "the waiting group in goray status", func() bool {
		s, _ := groupStatus(ctx, h)
		return len(s.Pending) == 1 && s.Pending[0].Strategy == "STRICT_SPREAD" && len(s.Pending[0].Bundles) == 4 && !s.Pending[0].Infeasible
	})
	r := runGoray(t, ctx, "status", "--temp-dir", h.tempDir)
	wantLines(t, r.stdout, "STRICT_SPREAD PENDING: {CPU: 1} {CPU: 1} {CPU: 1} {CPU: 1} (waiting:")
	joinNode(t, ctx, h, "127.0.0.4", "")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("pg-wait exited %d:\n%s", code, out)
	}
	wantLines(t, out, "created once the 4th node joined", "PASS pg-wait")
}

// TestPlacementGroupInfeasible: a STRICT_PACK group bigger than any node
// waits and is flagged infeasible in goray status.
func TestPlacementGroupInfeasible(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	joinNode(t, ctx, h, "127.0.0.2", "")
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "pg-hold", dir, "STRICT_PACK", "3", "1")
	id := waitFile(t, j, 30*time.Second, filepath.Join(dir, "made"))
	waitFor(t, 10*time.Second, "the group flagged infeasible", func() bool {
		s, _ := groupStatus(ctx, h)
		return len(s.Pending) == 1 && s.Pending[0].PlacementGroupID == id && s.Pending[0].Infeasible && s.Pending[0].Strategy == "STRICT_PACK"
	})
	r := runGoray(t, ctx, "status", "--temp-dir", h.tempDir)
	wantLines(t, r.stdout, "placement group "+id[:8]+` "held" STRICT_PACK PENDING: {CPU: 1} {CPU: 1} {CPU: 1} (infeasible`)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("pg-hold exited %d:\n%s", code, out)
	}
}

// TestPlacementGroupRace: two groups racing for the same CPUs: one is
// created, the other waits, and available resources never show a partial
// hold; the second is created once the first is removed.
func TestPlacementGroupRace(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "pg-race")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("pg-race exited %d:\n%s", code, out)
	}
	wantLines(t, out, "one created, the other PENDING", "the waiting group was created once the first was removed", "PASS pg-race")
}

// TestPlacementGroupNodeKilled: kill -9 of a node holding a bundle: the
// bundle is rescheduled on another node and a restartable actor in it
// comes back there.
func TestPlacementGroupNodeKilled(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	joinNode(t, ctx, h, "127.0.0.2", "")
	victim := joinNode(t, ctx, h, "127.0.0.3", "")
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "pg-nodekill", dir, victim.id)
	waitFile(t, j, 30*time.Second, filepath.Join(dir, "ready"))
	if err := syscall.Kill(victim.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("pg-nodekill exited %d:\n%s", code, out)
	}
	wantLines(t, out, "rescheduled on", "actor restarted in its bundle: ok", "PASS pg-nodekill")
	waitNoProcs(t, 10*time.Second, "processes of the killed node", func(p proc) bool { return p.mentions(victim.session) })
}

// TestPlacementGroupDetached: a detached group outlives its job and a new
// driver of its namespace finds it by name; the job's other group went
// with the job. Names are per namespace, as in Ray: a driver of another
// namespace does not find the group and names a group of its own so.
func TestPlacementGroupDetached(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	team := jobOptions{addr: h.addr, env: []string{"GORAY_NAMESPACE=team"}}
	j := startJob(t, team, testjobBin, "pg-detached", "keep")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("pg-detached exited %d:\n%s", code, out)
	}
	id := strings.TrimSpace(strings.TrimPrefix(lineWith(out, "detached group:"), "detached group:"))
	waitFor(t, 10*time.Second, "the job's scoped group removed with it", func() bool {
		r := runGoray(t, ctx, "list", "placement-groups", "--address", h.addr)
		return r.code == 0 && strings.Contains(lineWith(r.stdout, "keep-scoped"), "REMOVED") && strings.Contains(lineWith(r.stdout, id), "CREATED")
	})
	other := startJob(t, jobOptions{addr: h.addr, env: []string{"GORAY_NAMESPACE=other"}}, testjobBin, "pg-elsewhere", "keep")
	code, out = other.wait(ctx)
	if code != 0 {
		t.Fatalf("pg-elsewhere exited %d:\n%s", code, out)
	}
	wantLines(t, out, `no placement group named "keep" in namespace "other"`, "PASS pg-elsewhere")
	mine := strings.TrimSpace(strings.TrimPrefix(lineWith(out, "own group:"), "own group:"))
	r := runGoray(t, ctx, "list", "placement-groups", "--address", h.addr, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"namespace": "team"`) || !strings.Contains(r.stdout, `"namespace": "other"`) {
		t.Fatalf("goray list placement-groups --json does not show both groups' namespaces: %s", r)
	}
	j2 := startJob(t, team, testjobBin, "pg-lookup", "keep")
	code, out = j2.wait(ctx)
	if code != 0 {
		t.Fatalf("pg-lookup exited %d:\n%s", code, out)
	}
	wantLines(t, out, "found detached group: "+id+" CREATED", "PASS pg-lookup")
	if mine == "" || mine == id {
		t.Fatalf("the other namespace's group %q; want a group of its own, not %s", mine, id)
	}
}
