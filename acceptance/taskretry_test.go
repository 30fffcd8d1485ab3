package acceptance

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// retryTaskRow is the part of a `goray list tasks --json` row (one task
// attempt) the task retry test reads.
type retryTaskRow struct {
	TaskID       string `json:"task_id"`
	Attempt      int    `json:"attempt"`
	Function     string `json:"function"`
	ActorID      string `json:"actor_id"`
	State        string `json:"state"`
	ErrorType    string `json:"error_type"`
	ErrorMessage string `json:"error_message"`
}

// journalAppend is the registered name of the journal's Append method.
const journalAppend = "main.(*Journal).Append"

// TestActorTaskRetries: two restartable actors (MaxRestarts(1)) each have
// five calls under way (sent: the first running, blocked) and five queued
// (behind an argument not ready yet) when their workers are killed with
// kill -9. The one with MaxTaskRetries(3) runs all ten on its restarted
// instance, the five under way again as attempt 1 and first, in the order
// they were made (each call appends its number to the actor's fresh
// state, and the job checks what each saw); its twin without task retries
// fails the calls under way with ErrActorUnavailable, as before — but
// call 0, made with MaxCallRetries(1), which runs again first. The task
// events show each retried call's attempt 0 FAILED with the worker's
// failure and its attempt 1 FINISHED. A killed actor fails its call at
// once, retries or not.
func TestActorTaskRetries(t *testing.T) {
	ctx := testCtx(t)
	h := startHead(t, ctx)
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "taskretry", dir)

	names := []string{"journal-retry", "journal-twin"}
	pids := map[string]int{}
	for _, n := range names {
		pids[n] = readPid(t, waitFile(t, j, 30*time.Second, filepath.Join(dir, n+".pid")))
	}
	actorIDs := map[string]string{} // name -> actor id
	for _, a := range list[actorRow](h, ctx, "actors") {
		if pid, ok := pids[a.Name]; ok {
			if a.State != "ALIVE" || a.Pid != pid {
				t.Fatalf("goray list actors shows %s %s in pid %d; want ALIVE in pid %d (its call's)", a.Name, a.State, a.Pid, pid)
			}
			actorIDs[a.Name] = a.ActorID
		}
	}
	if len(actorIDs) != len(names) {
		t.Fatalf("goray list actors shows %v of the journals %v", actorIDs, names)
	}
	// Calls 0..4 of both actors are under way (sent to the worker) and
	// 5..9 are queued (waiting for their argument) before the kill.
	waitFor(t, 30*time.Second, "calls 0..4 to be sent and 5..9 to wait for their argument", func() bool {
		sent, waiting := map[string]int{}, map[string]int{}
		for _, r := range list[retryTaskRow](h, ctx, "tasks") {
			if r.Function != journalAppend || r.Attempt != 0 {
				continue
			}
			switch r.State {
			case "SUBMITTED_TO_WORKER", "RUNNING":
				sent[r.ActorID]++
			case "PENDING_ARGS_AVAIL":
				waiting[r.ActorID]++
			}
		}
		for _, id := range actorIDs {
			if sent[id] != 5 || waiting[id] != 5 {
				return false
			}
		}
		return true
	})
	for _, n := range names {
		killWorker(t, j, pids[n])
	}
	waitFor(t, 30*time.Second, "both journals to be ALIVE again in new workers", func() bool {
		back := 0
		for _, a := range list[actorRow](h, ctx, "actors") {
			if pid, ok := pids[a.Name]; ok && a.State == "ALIVE" && a.Pid > 0 && a.Pid != pid {
				back++
			}
		}
		return back == len(names)
	})
	if err := os.WriteFile(filepath.Join(dir, "open"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("testjob taskretry exited %d:\n%s", code, out)
	}
	done := regexp.MustCompile(fmt.Sprintf(`journal-retry: all 10 calls completed on the restarted instance \(pid \d+ != killed %d\), in order: \[0 1 2 3 4 5 6 7 8 9\]`, pids["journal-retry"]))
	if !done.MatchString(out) {
		t.Errorf("output lacks %s:\n%s", done, out)
	}
	wantLines(t, out,
		"journal-retry: the calls under way ran again as attempt 1: ok",
		"journal-twin: call 0, with MaxCallRetries(1), ran again first on the restarted instance: ok",
		"journal-twin: the other 4 calls under way failed with ErrActorUnavailable, the 5 queued ran on the restarted instance: ok",
		"journal-killed: the call under way failed with ErrActorDied, not retried: ok",
		"PASS taskretry")

	// The task events: per retried call, attempt 0 FAILED with the
	// worker's failure, attempt 1 FINISHED; the twin's calls ran once.
	type attempts map[int]retryTaskRow
	var calls map[string]attempts // task id -> attempt -> row
	waitFor(t, 15*time.Second, "the task events of the retried calls", func() bool {
		calls = map[string]attempts{}
		for _, r := range list[retryTaskRow](h, ctx, "tasks") {
			if r.Function == journalAppend && r.ActorID == actorIDs["journal-retry"] {
				if calls[r.TaskID] == nil {
					calls[r.TaskID] = attempts{}
				}
				calls[r.TaskID][r.Attempt] = r
			}
		}
		retried := 0
		for _, as := range calls {
			if as[1].State == "FINISHED" && as[0].State == "FAILED" {
				retried++
			}
		}
		return retried == 5
	})
	for id, as := range calls {
		if len(as) > 2 || as[1].TaskID == "" && as[0].State != "FINISHED" {
			t.Errorf("task %s of journal-retry has attempts %v; want attempt 0 FINISHED, or 0 FAILED and 1 FINISHED", id, as)
		}
		if as[1].TaskID != "" && (as[0].ErrorType != "ActorUnavailableError" || !strings.Contains(as[0].ErrorMessage, "restarts") || !strings.Contains(as[0].ErrorMessage, "retrying")) {
			t.Errorf("attempt 0 of retried task %s failed with %s: %s; want an ActorUnavailableError naming the worker's failure and the retry", id, as[0].ErrorType, as[0].ErrorMessage)
		}
	}
	twinRetried := 0
	for _, r := range list[retryTaskRow](h, ctx, "tasks") {
		if r.Function == journalAppend && r.ActorID == actorIDs["journal-twin"] && r.Attempt > 0 {
			twinRetried++
		}
	}
	if twinRetried != 1 {
		t.Errorf("journal-twin ran %d retries; want 1 (call 0's, MaxCallRetries(1))", twinRetried)
	}
	t.Logf("attempt 0 of a retried call: %s: %s", firstRetried(calls).ErrorType, firstRetried(calls).ErrorMessage)
}

// firstRetried returns attempt 0 of a retried call in calls.
func firstRetried[M ~map[int]retryTaskRow](calls map[string]M) retryTaskRow {
	for _, as := range calls {
		if _, ok := as[1]; ok {
			return as[0]
		}
	}
	return retryTaskRow{}
}

// TestDocActorTaskRetries runs the actor task retries example as its doc
// and docs/actor-task-retries.md show it, on an embedded node and on a
// started head: the ledger with MaxTaskRetries runs the steps under way
// when its worker killed itself again on its new worker, in order, step 3
// as attempt 1; the one without fails step 3 with ErrActorUnavailable;
// `goray list tasks --filter state=FAILED` shows step 3's failed attempt 0.
func TestDocActorTaskRetries(t *testing.T) {
	wantRun := func(t *testing.T, r cliResult) {
		t.Helper()
		want := strings.Join([]string{
			"ledger with MaxRestarts(1), MaxTaskRetries(3):",
			"step 1 -> [1]",
			"step 2 -> [1 2]",
			"step 3 -> [3] (attempt 1, on a new worker: attempt 0 killed the old one)",
			"step 4 -> [3 4]",
			"step 5 -> [3 4 5]",
			"step 6 -> [3 4 5 6]",
			"ledger with MaxRestarts(1) only:",
			"step 1 -> [1]",
			"step 2 -> [1 2]",
			"step 3 failed with ErrActorUnavailable",
			"step 7 ran on a new worker: true",
			"OK",
		}, "\n") + "\n"
		if r.stdout != want {
			t.Errorf("the example printed\n%s\nwant (as the doc shows)\n%s", r.stdout, want)
		}
	}
	for _, c := range []struct{ name, file string }{
		{"example", "examples/actor-retries/main.go"},
		{"doc", "docs/actor-task-retries.md"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDocRun(t, testCtxFor(t, 3*time.Minute))
			out := d.runBlock("", c.file, "go run ./examples/actor-retries", 0)
			wantRun(t, out[0])
			d.checkNothingLeft()
		})
	}
	t.Run("cluster", func(t *testing.T) {
		d := newDocRun(t, testCtxFor(t, 3*time.Minute))
		out := d.runBlock("", "docs/actor-task-retries.md", "goray start --head --port 6379", 0)
		wantLines(t, out[0].stdout, "Started goray head node")
		wantRun(t, out[1])
		failed := regexp.MustCompile(`(?m)^[0-9a-f]+\s+0\s+\S*Ledger\S*Record\s+FAILED\s.*ActorUnavailableError: its worker failed and it restarts`)
		if !failed.MatchString(out[2].stdout) {
			t.Errorf("goray list tasks --filter state=FAILED shows no failed attempt 0 of Record with the worker's failure:\n%s", out[2].stdout)
		}
		wantLines(t, out[3].stdout, "Stopped goray head node")
		d.checkNothingLeft()
	})
}
