package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/gcs"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/spawn"
	"github.com/goray-dev/goray/internal/waitfor"
)

// memStore is the GCS KV in memory; fail makes every write fail.
type memStore struct {
	mu      sync.Mutex
	recs    map[string][]byte
	fail    bool
	drivers map[int]string // pid -> goray job id
}

func newMemStore() *memStore {
	return &memStore{recs: map[string][]byte{}, drivers: map[int]string{}}
}

func (m *memStore) Put(ctx context.Context, id string, v []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return errors.New("store down")
	}
	m.recs[id] = bytes.Clone(v)
	return nil
}

func (m *memStore) Del(ctx context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return errors.New("store down")
	}
	delete(m.recs, id)
	return nil
}

func (m *memStore) List(ctx context.Context) (map[string][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range m.recs {
		out[k] = bytes.Clone(v)
	}
	return out, nil
}

func (m *memStore) DriverJob(ctx context.Context, pid int, since time.Time) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.drivers[pid]
	return id, ok, nil
}

// record returns the stored record of id.
func (m *memStore) record(t *testing.T, id string) (Job, bool) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.recs[id]
	if !ok {
		return Job{}, false
	}
	var j Job
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatalf("record %s: %v", id, err)
	}
	return j, true
}

// fixture is a supervisor over a temp session and binary store.
type fixture struct {
	t     *testing.T
	dir   string
	bins  *Binaries
	store *memStore
	sup   *Supervisor
}

func newFixture(t *testing.T, o Options) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir(), store: newMemStore()}
	var err error
	if f.bins, err = NewBinaries(filepath.Join(f.dir, "bin"), 0, nil); err != nil {
		t.Fatal(err)
	}
	creds, err := auth.New("test-token-0123456789", nil)
	if err != nil {
		t.Fatal(err)
	}
	o.Binaries, o.Store, o.SessionDir, o.GCSAddress, o.NodeIP, o.Auth = f.bins, f.store, filepath.Join(f.dir, "session_1"), "127.0.0.1:6379", "127.0.0.1", creds
	o.Environ = []string{"PATH=" + os.Getenv("PATH")}
	f.sup = NewSupervisor(o)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		if err := f.sup.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

// script stores a shell script as a job binary and returns its sha256.
func (f *fixture) script(body string) string {
	f.t.Helper()
	b := []byte("#!/bin/sh\n" + body + "\n")
	sum := sha256.Sum256(b)
	sha := hex.EncodeToString(sum[:])
	if _, _, err := f.bins.Put(sha, bytes.NewReader(b)); err != nil {
		f.t.Fatal(err)
	}
	return sha
}

// wait polls the job until cond holds.
func (f *fixture) wait(id, what string, cond func(Job) bool) Job {
	f.t.Helper()
	deadline := time.Now().Add(waitfor.Generous)
	for {
		j, ch, err := f.sup.Watch(id)
		if err != nil {
			f.t.Fatal(err)
		}
		if cond(j) {
			return j
		}
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
			f.t.Fatalf("job %s: timed out waiting for %s; job: %+v", id, what, j)
		}
	}
}

func (f *fixture) finished(id string) Job {
	f.t.Helper()
	return f.wait(id, "the end", func(j Job) bool { return j.Status.Terminal() })
}

func (f *fixture) log(j Job) string {
	f.t.Helper()
	b, err := os.ReadFile(j.LogFile)
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

func TestSupervisorRunsDrivers(t *testing.T) {
	leaktest.Goroutines(t)
	f := newFixture(t, Options{})
	for _, tc := range []struct {
		name     string
		script   string
		args     []string
		env      []string
		status   Status
		message  string
		code     int
		wantLogs []string
	}{
		{name: "success", script: `echo "arg=$1 foo=$FOO addr=$GORAY_ADDRESS ip=$GORAY_NODE_IP id=$GORAY_JOB_SUBMISSION_ID mode=$GORAY_AUTH_MODE"; pwd; echo oops >&2`,
			args: []string{"one"}, env: []string{"FOO=bar"}, status: StatusSucceeded, message: "exited with status 0",
			wantLogs: []string{"arg=one foo=bar addr=127.0.0.1:6379 ip=127.0.0.1 id=", "mode=token", "oops", "/session_1/jobs/"}},
		{name: "exit 3", script: `echo failing; exit 3`, status: StatusFailed, message: "exited with status 3", code: 3, wantLogs: []string{"failing"}},
		{name: "signal", script: `kill -KILL $$`, status: StatusFailed, message: "killed by signal killed (9)", code: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := f.sup.Submit(SubmitRequest{BinarySHA256: f.script(tc.script), Args: tc.args, Env: tc.env, Metadata: map[string]string{"who": "test"}})
			if err != nil {
				t.Fatal(err)
			}
			j := f.finished(id)
			if j.Status != tc.status || !strings.Contains(j.Message, tc.message) || j.ExitCode == nil || *j.ExitCode != tc.code {
				t.Fatalf("job ended %s %q code %v; want %s %q code %d", j.Status, j.Message, j.ExitCode, tc.status, tc.message, tc.code)
			}
			if j.StartTime == nil || j.EndTime == nil || j.DriverPid == 0 || j.Metadata["who"] != "test" {
				t.Errorf("job lacks times, pid or metadata: %+v", j)
			}
			out := f.log(j)
			for _, w := range tc.wantLogs {
				if !strings.Contains(out, w) {
					t.Errorf("log lacks %q:\n%s", w, out)
				}
			}
			// The record reaches the store with its final status.
			deadline := time.Now().Add(waitfor.Generous)
			for {
				r, ok := f.store.record(t, id)
				if ok && r.Status == tc.status {
					if len(r.EnvNames) != len(tc.env) {
						t.Errorf("record env names %v, want the names of %v", r.EnvNames, tc.env)
					}
					f.store.mu.Lock()
					raw := f.store.recs[id]
					f.store.mu.Unlock()
					if bytes.Contains(raw, []byte("bar")) {
						t.Errorf("record keeps an env value: %s", raw)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("record of %s: %+v (found %v), want status %s", id, r, ok, tc.status)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func TestSupervisorStop(t *testing.T) {
	leaktest.Goroutines(t)
	f := newFixture(t, Options{StopGrace: 300 * time.Millisecond})
	for _, tc := range []struct {
		name, script string
	}{
		// A child in the driver's process group goes with it.
		{"sigterm", `sleep 60 & echo $! > child.pid; wait`},
		// A driver that ignores SIGTERM is killed after the grace period.
		{"ignores sigterm", `trap '' TERM; sleep 60 & echo $! > child.pid; while :; do wait; done`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := f.sup.Submit(SubmitRequest{BinarySHA256: f.script(tc.script)})
			if err != nil {
				t.Fatal(err)
			}
			j := f.wait(id, "RUNNING", func(j Job) bool { return j.Status == StatusRunning })
			pidFile := filepath.Join(j.WorkingDir, "child.pid")
			var child int
			deadline := time.Now().Add(waitfor.Generous)
			for child == 0 {
				if b, err := os.ReadFile(pidFile); err == nil && bytes.HasSuffix(b, []byte("\n")) {
					child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				} else if time.Now().After(deadline) {
					t.Fatal("the driver wrote no child pid")
				} else {
					time.Sleep(10 * time.Millisecond)
				}
			}
			if ok, err := f.sup.Stop(id); !ok || err != nil {
				t.Fatalf("Stop = %v, %v", ok, err)
			}
			j = f.finished(id)
			if j.Status != StatusStopped || !strings.Contains(j.Message, "stopped by request") {
				t.Fatalf("stopped job: %s %q", j.Status, j.Message)
			}
			if err := syscall.Kill(child, 0); !errors.Is(err, syscall.ESRCH) {
				// A zombie is gone too: its parent (the driver) is dead, so
				// init reaps it; poll briefly.
				deadline := time.Now().Add(waitfor.Generous)
				for syscall.Kill(child, 0) == nil && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if syscall.Kill(child, 0) == nil {
					t.Errorf("the driver's child %d outlived the stop", child)
				}
			}
			if ok, err := f.sup.Stop(id); ok || err != nil {
				t.Errorf("second Stop = %v, %v; want false, nil", ok, err)
			}
		})
	}
}

func TestSupervisorPendingAndLimits(t *testing.T) {
	leaktest.Goroutines(t)
	f := newFixture(t, Options{MaxRunning: 1, MaxJobs: 3, StopGrace: 200 * time.Millisecond})
	block := f.script(`exec sleep 60`)
	first, err := f.sup.Submit(SubmitRequest{BinarySHA256: block, SubmissionID: "first"})
	if err != nil {
		t.Fatal(err)
	}
	f.wait(first, "RUNNING", func(j Job) bool { return j.Status == StatusRunning })
	second, err := f.sup.Submit(SubmitRequest{BinarySHA256: block})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(second, "gorayjob_") {
		t.Errorf("generated id %q", second)
	}
	if j, _ := f.sup.Get(second); j.Status != StatusPending {
		t.Fatalf("second job with one slot taken: %s, want PENDING", j.Status)
	}
	if _, err := f.sup.Submit(SubmitRequest{BinarySHA256: block, SubmissionID: "first"}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate id: %v, want ErrExists", err)
	}
	if err := f.sup.Delete(first); !errors.Is(err, ErrNotFinished) {
		t.Errorf("Delete of a running job: %v, want ErrNotFinished", err)
	}
	third, err := f.sup.Submit(SubmitRequest{BinarySHA256: block})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.sup.Submit(SubmitRequest{BinarySHA256: block}); !errors.Is(err, ErrTooManyJobs) {
		t.Errorf("fourth job with MaxJobs 3: %v, want ErrTooManyJobs", err)
	}
	if _, err := f.sup.Stop(second); err != nil {
		t.Fatal(err)
	}
	if j := f.finished(second); j.Status != StatusStopped || j.Message != "stopped before it started" || j.DriverPid != 0 {
		t.Errorf("stopped pending job: %+v", j)
	}
	_, _ = f.sup.Stop(first)
	f.finished(first)
	f.wait(third, "RUNNING once the slot is free", func(j Job) bool { return j.Status == StatusRunning })
	// Deleting removes the record, the log and the working directory.
	j, _ := f.sup.Get(first)
	if err := f.sup.Delete(first); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sup.Get(first); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete: %v", err)
	}
	if _, err := os.Stat(j.LogFile); !os.IsNotExist(err) {
		t.Errorf("log after Delete: %v", err)
	}
	deadline := time.Now().Add(waitfor.Generous)
	for {
		if _, ok := f.store.record(t, first); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the deleted job's record stays in the store")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Closing stops the running job.
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	if err := f.sup.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if j, _ := f.sup.Get(third); j.Status != StatusStopped || !strings.Contains(j.Message, "the head stopped") {
		t.Errorf("job running at Close: %s %q", j.Status, j.Message)
	}
	if _, err := f.sup.Submit(SubmitRequest{BinarySHA256: block}); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit after Close: %v", err)
	}
}

func TestSupervisorRecordsSurviveAndLink(t *testing.T) {
	leaktest.Goroutines(t)
	f := newFixture(t, Options{})
	// The driver's goray job is found by its pid.
	sha := f.script(`exec sleep 60`)
	id, err := f.sup.Submit(SubmitRequest{BinarySHA256: sha})
	if err != nil {
		t.Fatal(err)
	}
	j := f.wait(id, "RUNNING", func(j Job) bool { return j.Status == StatusRunning })
	f.store.mu.Lock()
	f.store.drivers[j.DriverPid] = "00112233"
	f.store.mu.Unlock()
	f.wait(id, "linked", func(j Job) bool { return j.GorayJobID == "00112233" })
	// Records written while the store fails are written once it is back.
	f.store.mu.Lock()
	f.store.fail = true
	f.store.mu.Unlock()
	done, err := f.sup.Submit(SubmitRequest{BinarySHA256: f.script(`exit 0`), SubmissionID: "done"})
	if err != nil {
		t.Fatal(err)
	}
	f.finished(done)
	f.store.mu.Lock()
	f.store.fail = false
	f.store.mu.Unlock()
	// Both records reach the store: the finished job's, and the running
	// job's link (written after the link was made, maybe while the store
	// failed).
	deadline := time.Now().Add(waitfor.Generous)
	for {
		r, ok := f.store.record(t, done)
		l, lok := f.store.record(t, id)
		if ok && r.Status == StatusSucceeded && lok && l.GorayJobID == "00112233" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("records after the store came back: %s %+v %v; %s %+v %v", done, r, ok, id, l, lok)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A new supervisor (a restarted head) on the same store: the running
	// job died with the old head; the finished one is as it was.
	rec, _ := f.store.record(t, id)
	if rec.Status != StatusRunning {
		t.Fatalf("record of the running job: %s", rec.Status)
	}
	f.store.mu.Lock()
	snapshot := map[string][]byte{}
	for k, v := range f.store.recs {
		snapshot[k] = v
	}
	f.store.mu.Unlock()
	again := newMemStore()
	again.recs = snapshot
	again.recs["garbage"] = []byte("{")
	sup2 := NewSupervisor(Options{Binaries: f.bins, Store: again, SessionDir: filepath.Join(f.dir, "session_2")})
	defer sup2.Close(context.Background())
	if err := sup2.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	j2, err := sup2.Get(id)
	if err != nil || j2.Status != StatusFailed || !strings.Contains(j2.Message, "the head stopped while the job was running") || j2.GorayJobID != "00112233" {
		t.Errorf("reloaded running job: %+v, %v", j2, err)
	}
	if j3, err := sup2.Get(done); err != nil || j3.Status != StatusSucceeded {
		t.Errorf("reloaded finished job: %+v, %v", j3, err)
	}
	if len(sup2.List()) != 2 {
		t.Errorf("reloaded %d jobs, want 2 (the garbage record skipped)", len(sup2.List()))
	}
}

func TestSubmitRefusesBadRequests(t *testing.T) {
	leaktest.Goroutines(t)
	f := newFixture(t, Options{})
	sha := f.script(`exit 0`)
	missing := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name  string
		req   SubmitRequest
		field string
		want  string
	}{
		{"no sha", SubmitRequest{}, "binary_sha256", "not a sha256"},
		{"upper-case sha", SubmitRequest{BinarySHA256: strings.ToUpper(sha)}, "binary_sha256", "not a sha256"},
		{"unknown binary", SubmitRequest{BinarySHA256: missing}, "binary_sha256", "upload it first"},
		{"bad working dir sha", SubmitRequest{BinarySHA256: sha, WorkingDirSHA256: "../x"}, "working_dir_sha256", "not a sha256"},
		{"unknown working dir", SubmitRequest{BinarySHA256: sha, WorkingDirSHA256: missing}, "working_dir_sha256", "upload it first"},
		{"bad id", SubmitRequest{BinarySHA256: sha, SubmissionID: "a/b"}, "submission_id", "letters, digits"},
		{"env without =", SubmitRequest{BinarySHA256: sha, Env: []string{"FOO"}}, "env[0]", "NAME=value"},
		{"env bad name", SubmitRequest{BinarySHA256: sha, Env: []string{"A=1", "1X=2"}}, "env[1]", "NAME=value"},
		{"reserved env", SubmitRequest{BinarySHA256: sha, Env: []string{"GORAY_AUTH_TOKEN=x"}}, "env[0]", "set by the head"},
		{"NUL arg", SubmitRequest{BinarySHA256: sha, Args: []string{"a\x00b"}}, "args[0]", "NUL"},
		{"id .", SubmitRequest{BinarySHA256: sha, SubmissionID: "."}, "submission_id", "starting with a letter or digit"},
		{"id ..", SubmitRequest{BinarySHA256: sha, SubmissionID: ".."}, "submission_id", "starting with a letter or digit"},
		{"hidden id", SubmitRequest{BinarySHA256: sha, SubmissionID: ".hidden"}, "submission_id", "starting with a letter or digit"},
		{"id starting with -", SubmitRequest{BinarySHA256: sha, SubmissionID: "-x"}, "submission_id", "starting with a letter or digit"},
		{"id too long", SubmitRequest{BinarySHA256: sha, SubmissionID: strings.Repeat("a", 129)}, "submission_id", "1 to 128"},
		{"args too large", SubmitRequest{BinarySHA256: sha, Args: []string{strings.Repeat("a", MaxRecordExtras)}}, "args, metadata, env", "at most 16384 bytes (16 KiB) of them per job"},
		{"metadata too large", SubmitRequest{BinarySHA256: sha, Metadata: map[string]string{"k": strings.Repeat("v", 10000), "l": strings.Repeat("w", 10000)}}, "args, metadata, env", "at most 16384 bytes"},
		{"env names too large", SubmitRequest{BinarySHA256: sha, Env: []string{strings.Repeat("A", 9000) + "=1", strings.Repeat("B", 9000) + "=2"}}, "args, metadata, env", "at most 16384 bytes"},
		{"escaped args too large", SubmitRequest{BinarySHA256: sha, Args: []string{strings.Repeat("<", MaxRecordExtras/4)}}, "args, metadata, env", "at most 16384 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.sup.Submit(tc.req)
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Submit: %v; want an InvalidError on %s saying %q", err, tc.field, tc.want)
			}
		})
	}
	if n := len(f.sup.List()); n != 0 {
		t.Errorf("%d jobs after refused submissions", n)
	}
	// Up to the limit is fine; so are long values of variables (not
	// kept), and ids starting with a digit.
	for _, req := range []SubmitRequest{
		{BinarySHA256: sha, Args: []string{strings.Repeat("a", MaxRecordExtras-20)}},
		{BinarySHA256: sha, Env: []string{"BIG=" + strings.Repeat("v", 64<<10)}},
		{BinarySHA256: sha, SubmissionID: "0.a_b-c"},
	} {
		id, err := f.sup.Submit(req)
		if err != nil {
			t.Fatalf("Submit: %v", err)
		}
		f.finished(id)
	}
}

// Every record the head may keep by default fits in the GCS KV's quota of
// a namespace, however large what the submissions add.
func TestRecordsFitTheKVQuota(t *testing.T) {
	now := time.Now()
	code := -1
	id := strings.Repeat("i", 128)
	session := "/" + strings.Repeat("s", 1024)
	j := Job{
		SubmissionID: id, Status: StatusStopped, Message: strings.Repeat("m", 2048),
		BinarySHA256: strings.Repeat("ab", 32), GorayJobID: strings.Repeat("0", 64), DriverPid: 1 << 22, ExitCode: &code,
		SubmitTime: now, StartTime: &now, EndTime: &now,
		LogFile:    filepath.Join(session, "logs", "job-driver-"+id+".log"),
		WorkingDir: filepath.Join(session, "jobs", id),
	}
	base, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	// kvCost: key + value + 64 bytes of overhead (gcs/limits.go).
	worst := int64(len(id) + len(base) + MaxRecordExtras + 64)
	if total := DefaultMaxJobs * worst; total > gcs.DefaultKVNamespaceBytes {
		t.Errorf("%d records of up to %d bytes: %d bytes, beyond the KV namespace quota of %d", DefaultMaxJobs, worst, total, gcs.DefaultKVNamespaceBytes)
	}
}

// Records are the Store's: a record whose id or paths the head would not
// have written is skipped, so that no file outside a job's log and
// working directory is read or removed through it.
func TestLoadSkipsForgedRecords(t *testing.T) {
	leaktest.Goroutines(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.MkdirAll(filepath.Join(victim, "jobs", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	if err := writeFile(secret, "secret"); err != nil {
		t.Fatal(err)
	}
	bins, err := NewBinaries(filepath.Join(dir, "bin"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(dir, "session_2")
	old := filepath.Join(dir, "session_1")
	rec := func(id, session string) Job {
		return Job{
			SubmissionID: id, Status: StatusSucceeded, BinarySHA256: strings.Repeat("ab", 32),
			LogFile:    filepath.Join(session, "logs", "job-driver-"+id+".log"),
			WorkingDir: filepath.Join(session, "jobs", id),
		}
	}
	store := newMemStore()
	put := func(key string, j Job) {
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		store.recs[key] = b
	}
	for _, tc := range []struct {
		name string
		job  Job
	}{
		{"id ..", rec("..", filepath.Join(own, "x", "y"))},
		{"id .", rec(".", filepath.Join(own, "x"))},
		{"hidden id", rec(".x", own)},
		{"working dir elsewhere", func() Job { j := rec("w", own); j.WorkingDir = victim; return j }()},
		{"working dir of another id", func() Job { j := rec("w2", own); j.WorkingDir = filepath.Join(own, "jobs"); return j }()},
		{"log file elsewhere", func() Job { j := rec("l", own); j.LogFile = secret; return j }()},
		{"log file of another job", func() Job { j := rec("l2", own); j.LogFile = filepath.Join(own, "logs", "node.log"); return j }()},
		{"unclean paths", rec("u", own+"/../victim")},
		{"session elsewhere", rec("e", filepath.Join(victim, "session_3"))},
		{"beside it, not a session", rec("x", victim)},
		{"no paths", Job{SubmissionID: "n", Status: StatusSucceeded}},
	} {
		put(tc.name, tc.job)
		// The key is the id, as the head writes it.
		store.recs[tc.job.SubmissionID] = store.recs[tc.name]
		delete(store.recs, tc.name)
	}
	put("mine", rec("mine", own))
	put("earlier", rec("earlier", old))
	for _, d := range []string{filepath.Join(old, "jobs", "earlier"), filepath.Join(old, "logs")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeFile(filepath.Join(old, "logs", "job-driver-earlier.log"), "hi\n"); err != nil {
		t.Fatal(err)
	}
	sup := NewSupervisor(Options{Binaries: bins, Store: store, SessionDir: own})
	defer sup.Close(context.Background())
	if err := sup.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range sup.List() {
		ids = append(ids, j.SubmissionID)
	}
	if strings.Join(ids, " ") != "earlier mine" {
		t.Errorf("loaded %q, want only earlier and mine", ids)
	}
	for _, id := range []string{"..", ".", ".x", "w", "w2", "l", "l2", "u", "e", "x", "n"} {
		if err := sup.Delete(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Delete(%q) of a forged record: %v, want ErrNotFound", id, err)
		}
	}
	if _, err := os.Stat(filepath.Join(victim, "jobs", "x")); err != nil {
		t.Errorf("outside a job's directories: %v", err)
	}
	// An earlier head's job is deleted with its files.
	if err := sup.Delete("earlier"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(old, "jobs", "earlier"), filepath.Join(old, "logs", "job-driver-earlier.log")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after Delete: %v", p, err)
		}
	}
}

// TestMain starts internal/spawn's thread (it lives as long as the
// process) before any test counts goroutines.
func TestMain(m *testing.M) {
	cmd := exec.Command("true")
	if err := spawn.Start(cmd); err != nil {
		panic(err)
	}
	_ = cmd.Wait()
	os.Exit(m.Run())
}

// TestSupervisorBoundsFinishedJobs: past MaxFinished the finished jobs
// that ended first go, their records, logs and working directories with
// them; running ones stay, and a full table makes room with the oldest
// finished job instead of refusing.
func TestSupervisorBoundsFinishedJobs(t *testing.T) {
	leaktest.Goroutines(t)
	f := newFixture(t, Options{MaxFinished: 2, MaxJobs: 3})
	quick := f.script(`echo done`)
	var ended []Job
	for range 4 {
		id, err := f.sup.Submit(SubmitRequest{BinarySHA256: quick})
		if err != nil {
			t.Fatal(err)
		}
		ended = append(ended, f.finished(id))
	}
	ids := func() []string {
		var out []string
		for _, j := range f.sup.List() {
			out = append(out, j.SubmissionID)
		}
		return out
	}
	if got, want := ids(), []string{ended[2].SubmissionID, ended[3].SubmissionID}; !slices.Equal(got, want) {
		t.Fatalf("kept %v, want the last two finished %v", got, want)
	}
	for _, j := range ended[:2] {
		waitfor.Cond(t, waitfor.Generous, "the dropped job's record gone from the store", func() bool {
			_, ok := f.store.record(t, j.SubmissionID)
			return !ok
		})
		// The files go once the finishing job's goroutine has released
		// the table's lock, which can be after its record left the store.
		waitfor.Cond(t, waitfor.Generous, "the dropped job's log and working directory removed", func() bool {
			_, errLog := os.Stat(j.LogFile)
			_, errDir := os.Stat(j.WorkingDir)
			return os.IsNotExist(errLog) && os.IsNotExist(errDir)
		})
	}
	if _, err := os.Stat(ended[3].LogFile); err != nil {
		t.Errorf("a kept job's log: %v", err)
	}
	if n := f.sup.Dropped(); n != 2 {
		t.Errorf("Dropped() = %d, want 2", n)
	}
	// A running job is never dropped; a full table (MaxJobs 3) drops the
	// oldest finished one to take a new job.
	block := f.script(`exec sleep 60`)
	running, err := f.sup.Submit(SubmitRequest{BinarySHA256: block})
	if err != nil {
		t.Fatal(err)
	}
	f.wait(running, "RUNNING", func(j Job) bool { return j.Status == StatusRunning })
	next, err := f.sup.Submit(SubmitRequest{BinarySHA256: block})
	if err != nil {
		t.Fatalf("a submission with the table full of finished jobs: %v", err)
	}
	if got := ids(); slices.Contains(got, ended[2].SubmissionID) || !slices.Contains(got, running) || !slices.Contains(got, next) {
		t.Fatalf("kept %v: want the running jobs and not the oldest finished one", got)
	}
	for _, id := range []string{running, next} {
		_, _ = f.sup.Stop(id)
		f.finished(id)
	}
}
