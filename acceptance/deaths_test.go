package acceptance

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestClusterOwnerDeathsFreeCopies: eight actors on the head each own an
// object that a task on another node read (that node pulled a copy);
// killed at once, their deaths reach the other node (batched WorkersDied),
// which frees every copy although the driver still holds its refs.
func TestClusterOwnerDeathsFreeCopies(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	n2 := joinNode(t, ctx, h, "127.0.0.2", "")
	headID := readNodeJSON(t, h.session).NodeID
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "deaths", dir, headID, n2.id, "8")
	want := strings.Fields(waitFile(t, j, 60*time.Second, filepath.Join(dir, "ids")))
	if len(want) != 8 {
		t.Fatalf("job wrote %d object ids, want 8", len(want))
	}
	// onN2 returns the objects of want that n2's store holds.
	onN2 := func() ([]string, bool) {
		nodes, ok := objectStoreNodes(t, ctx, n2.tempDir)
		var held []string
		for _, id := range want {
			if slices.Contains(nodes[id], n2.id) {
				held = append(held, id)
			}
		}
		return held, ok
	}
	waitFor(t, 20*time.Second, "every copy on the other node", func() bool {
		held, ok := onN2()
		return ok && len(held) == len(want)
	})
	if err := os.WriteFile(filepath.Join(dir, "kill"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, j, 30*time.Second, filepath.Join(dir, "killed"))
	waitFor(t, 20*time.Second, "the dead owners' copies to be freed on the other node", func() bool {
		held, ok := onN2()
		return ok && len(held) == 0
	})
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("deaths job exited %d:\n%s", code, out)
	}
}

// objectStoreNodes lists the cluster's objects (`goray list objects`
// through the node of tempDir): the nodes whose store holds each, by
// object id; ok is false when the listing failed.
func objectStoreNodes(t *testing.T, ctx context.Context, tempDir string) (nodes map[string][]string, ok bool) {
	r := runGoray(t, ctx, "list", "objects", "--json", "--temp-dir", tempDir)
	if r.code != 0 {
		return nil, false
	}
	var out struct {
		Objects []struct {
			ObjectID   string   `json:"object_id"`
			StoreNodes []string `json:"store_nodes"`
		} `json:"objects"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		return nil, false
	}
	nodes = make(map[string][]string, len(out.Objects))
	for _, o := range out.Objects {
		nodes[o.ObjectID] = o.StoreNodes
	}
	return nodes, true
}
