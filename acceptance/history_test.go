package acceptance

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/goray-dev/goray/internal/testservers/redistest"
)

// historyStatusJSON is the GCS's bounded history in `goray status --json`.
type historyStatusJSON struct {
	DeadNodes int `json:"dead_nodes"`
	GCS       struct {
		History map[string]struct {
			Kept    int64 `json:"kept"`
			Cap     int64 `json:"cap"`
			Dropped int64 `json:"dropped"`
		} `json:"history"`
	} `json:"gcs"`
}

// TestHistoryBoundedAcrossGCSRestart: a head keeping its GCS in a real
// Redis with small history caps (1 dead node, 2 dead actors, 2 finished
// jobs) runs more jobs (each leaves a finished job and dead actors) and
// sees more nodes leave than it keeps: goray list shows at most the caps
// and says how many were dropped, goray status too, and Redis holds no
// more than what is listed. After the GCS is killed with SIGKILL and
// restarted by the head, the caps and the counts still hold, and the
// next job's end drops one more.
func TestHistoryBoundedAcrossGCSRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*trustTimeout)
	defer cancel()
	rs := redistest.Start(t)
	hist := "  history {\n    dead_nodes    = 1\n    dead_actors   = 2\n    finished_jobs = 2\n  }\n"
	cfg := writeConfig(t, shortTempDir(t), gcsHealth+redisGCS(rs.Address, hist))
	h := startHeadEnv(t, ctx, []string{"GORAY_GCS_REDIS_PASSWORD=" + rs.Password}, "--config", cfg, "--num-cpus", "2", "--node-name", "head")
	dumpHeadLogs(t, h)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Address, Password: rs.Password})
	t.Cleanup(func() { rdb.Close() })
	c := &trustCluster{h: h, rdb: rdb, prefix: "ft"}

	for range 3 {
		c.runQuickstart(t, ctx)
	}
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		n := joinNode(t, ctx, h, ip, "")
		if r := runGoray(t, ctx, "stop", "--temp-dir", n.tempDir); r.code != 0 {
			t.Fatalf("goray stop of the node at %s: %s", ip, r)
		}
		waitFor(t, 30*time.Second, "the node at "+ip+" dead or dropped", func() bool {
			s, r := h.status(ctx)
			if r.code != 0 {
				return false
			}
			for _, sn := range s.Nodes {
				if sn.NodeID == n.id {
					return sn.State == "DEAD"
				}
			}
			return true
		})
	}

	status := func() historyStatusJSON {
		t.Helper()
		r := runGoray(t, ctx, "status", "--json", "--temp-dir", h.tempDir)
		var s historyStatusJSON
		if r.code != 0 {
			t.Fatalf("goray status --json: %s", r)
		}
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
			t.Fatalf("goray status --json: %v\n%s", err, r.stdout)
		}
		return s
	}
	// check verifies the caps in goray list, goray status and Redis, and
	// returns the status.
	check := func(when string) historyStatusJSON {
		t.Helper()
		actors := list[actorRow](h, ctx, "actors")
		dead := 0
		for _, a := range actors {
			if a.State == "DEAD" {
				dead++
			}
		}
		jobs := list[jobRow](h, ctx, "jobs")
		finished := 0
		for _, j := range jobs {
			if j.State == "FINISHED" {
				finished++
			}
		}
		s := status()
		if dead != 2 || finished != 2 || s.DeadNodes != 1 {
			t.Fatalf("%s: goray lists %d dead actors, %d finished jobs, %d dead nodes; want the caps 2, 2 and 1", when, dead, finished, s.DeadNodes)
		}
		for _, k := range []string{"dead_nodes", "dead_actors", "finished_jobs"} {
			if b := s.GCS.History[k]; b.Dropped < 1 || b.Kept != b.Cap {
				t.Fatalf("%s: goray status --json's gcs.history.%s = %+v, want kept = cap and some dropped", when, k, b)
			}
		}
		if r := runGoray(t, ctx, "list", "actors", "--address", h.addr); r.code != 0 || !strings.Contains(r.stderr, "dead actors dropped, oldest first; cap 2") {
			t.Fatalf("%s: goray list actors does not say how many dead actors were dropped:\n%s", when, r)
		}
		if r := runGoray(t, ctx, "list", "jobs", "--address", h.addr); r.code != 0 || !strings.Contains(r.stderr, "finished jobs dropped, oldest first; cap 2") {
			t.Fatalf("%s: goray list jobs does not say how many finished jobs were dropped:\n%s", when, r)
		}
		text := runGoray(t, ctx, "status", "--temp-dir", h.tempDir)
		if text.code != 0 || !strings.Contains(text.stdout, "1 dead nodes dropped, oldest first; cap 1") {
			t.Fatalf("%s: goray status does not say how many dead nodes were dropped:\n%s", when, text)
		}
		// Redis holds what the GCS lists, no more.
		for table, want := range map[string]int{"actors": len(actors), "jobs": len(jobs), "nodes": 2} {
			n, err := rdb.HLen(ctx, c.prefix+":"+table).Result()
			if err != nil {
				t.Fatal(err)
			}
			if int(n) != want {
				t.Fatalf("%s: Redis holds %d %s records, the GCS lists %d", when, n, table, want)
			}
		}
		return s
	}
	before := check("before the GCS restart")

	c.restartGCS(t, ctx)
	after := check("after the GCS restart")
	for _, k := range []string{"dead_nodes", "dead_actors", "finished_jobs"} {
		if after.GCS.History[k].Dropped != before.GCS.History[k].Dropped {
			t.Fatalf("%s dropped: %d before the restart, %d after", k, before.GCS.History[k].Dropped, after.GCS.History[k].Dropped)
		}
	}

	// It goes on: one more job's end drops one more finished job.
	c.runQuickstart(t, ctx)
	last := check("after one more job")
	if got, want := last.GCS.History["finished_jobs"].Dropped, after.GCS.History["finished_jobs"].Dropped+1; got != want {
		t.Fatalf("finished jobs dropped after one more job: %d, want %d", got, want)
	}
}
