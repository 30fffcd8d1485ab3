package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/dashboard/jobclient"
	"github.com/goray-dev/goray/dashboard/jobs"
	"github.com/goray-dev/goray/internal/auth"
)

// jobStatus runs `goray job status ID --json`.
func jobStatus(t *testing.T, ctx context.Context, env []string, id string) jobs.Job {
	t.Helper()
	r := runGorayEnv(t, ctx, env, "job", "status", id, "--json")
	var j jobs.Job
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &j) != nil {
		t.Fatalf("goray job status %s: %s", id, r)
	}
	return j
}

// TestJobs submits jobs to a head with one more node through `goray job`:
// an example's output comes back and its status is the exit code; a
// second submission of a binary uploads nothing; a failing job is FAILED
// with its exit status; a long job's log survives the submitting client's
// death, and stopping the job ends its driver and its workers on the other
// node.
func TestJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := writeConfig(t, shortTempDir(t), fastHealth)
	h := startHead(t, ctx, "--config", cfg, "--num-cpus", "2", "--node-name", "head", "--dashboard-port", "-1")
	worker := joinNode(t, ctx, h, "127.0.0.2", "")

	var info struct {
		DashboardAddress string `json:"dashboard_address"`
	}
	b, err := os.ReadFile(filepath.Join(h.session, "node.json"))
	if err != nil || json.Unmarshal(b, &info) != nil || !strings.HasPrefix(info.DashboardAddress, "127.0.0.1:") {
		t.Fatalf("node.json dashboard_address: %q (%v)\n%s", info.DashboardAddress, err, b)
	}
	url := "http://" + info.DashboardAddress
	// Commands find the head's dashboard by --temp-dir (node.json), by
	// $GORAY_DASHBOARD_ADDRESS or by --address.
	local := []string{"--temp-dir", h.tempDir}
	envDash := []string{"GORAY_DASHBOARD_ADDRESS=" + url}

	// The job API refuses a caller without the token.
	resp, err := http.Get(url + "/api/jobs/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /api/jobs/ without the token: %d, want 401", resp.StatusCode)
	}

	t.Run("submit --wait an example", func(t *testing.T) {
		r := runGoray(t, ctx, append([]string{"job", "submit", "--wait", "--submission-id", "quickstart-1"}, append(local, "--", quickstartBin)...)...)
		if r.code != 0 {
			t.Fatalf("goray job submit --wait quickstart: %s", r)
		}
		wantLines(t, r.stdout, "goray is running on the cluster at "+h.addr, "all checks passed")
		wantLines(t, r.stderr, "Uploaded "+quickstartBin, "Job quickstart-1 submitted", "Job quickstart-1 SUCCEEDED")
		j := jobStatus(t, ctx, envDash, "quickstart-1")
		if j.Status != jobs.StatusSucceeded || j.ExitCode == nil || *j.ExitCode != 0 || j.GorayJobID == "" {
			t.Fatalf("quickstart job: %+v", j)
		}
		// The job links to the goray job its driver registered.
		found := false
		for _, row := range list[struct {
			JobID string `json:"job_id"`
		}](h, ctx, "jobs") {
			found = found || row.JobID == j.GorayJobID
		}
		if !found {
			t.Errorf("goray list jobs lacks the job's goray job %s", j.GorayJobID)
		}
	})

	t.Run("second submit uploads nothing", func(t *testing.T) {
		r := runGorayEnv(t, ctx, envDash, "job", "submit", "--no-wait", "--", quickstartBin)
		if r.code != 0 || !strings.Contains(r.stderr, "nothing uploaded") {
			t.Fatalf("second submit: %s", r)
		}
		id := strings.TrimSpace(r.stdout)
		creds, err := auth.New(readToken(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := jobclient.New(url, creds)
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.BinaryStats(ctx)
		if err != nil || st.Uploads != 1 {
			t.Fatalf("binary uploads after two submissions of one binary: %+v, %v; want 1", st, err)
		}
		waitFor(t, 60*time.Second, "the second quickstart job to succeed", func() bool {
			return jobStatus(t, ctx, envDash, id).Status == jobs.StatusSucceeded
		})
	})

	t.Run("failing job", func(t *testing.T) {
		r := runGoray(t, ctx, "job", "submit", "--address", url, "--submission-id", "fails", "--", testjobBin, "job-exit", "3")
		if r.code != 1 || !strings.Contains(r.stderr, "Job fails FAILED: the driver exited with status 3") {
			t.Fatalf("submit of a job that exits 3: %s", r)
		}
		wantLines(t, r.stdout, "job-exit: exiting with 3")
		j := jobStatus(t, ctx, envDash, "fails")
		if j.Status != jobs.StatusFailed || j.ExitCode == nil || *j.ExitCode != 3 {
			t.Fatalf("failing job: %+v", j)
		}
	})

	t.Run("submit --working-dir", func(t *testing.T) {
		// The driver starts in the unpacked upload on the head and ships
		// it to its workers: both nodes read the files by relative path.
		src := t.TempDir()
		for name, body := range map[string]string{"config.txt": "submitted-dir", "model.bin": "left-out"} {
			if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		r := runGoray(t, ctx, "job", "submit", "--address", url, "--submission-id", "wd", "--working-dir", src, "--exclude", "*.bin",
			"--", testjobBin, "files", "config.txt", "model.bin")
		if r.code != 0 {
			t.Fatalf("submit --working-dir: %s", r)
		}
		wantLines(t, r.stderr, "Uploaded working dir "+src)
		wantLines(t, r.stdout, "driver-file config.txt submitted-dir", "driver-file model.bin missing",
			"file "+worker.id+" config.txt submitted-dir", "file "+worker.id+" model.bin missing")
		j := jobStatus(t, ctx, envDash, "wd")
		if j.WorkingDirSHA256 == "" || !strings.Contains(r.stdout, "driver-cwd "+filepath.Join(j.WorkingDir, "working_dir")+"\n") {
			t.Errorf("job %+v; its driver's directory is not WorkingDir/working_dir:\n%s", j, r.stdout)
		}
		// A directory that does not exist is refused before anything is
		// uploaded, naming it.
		r = runGoray(t, ctx, "job", "submit", "--address", url, "--working-dir", filepath.Join(src, "nope"), "--", testjobBin, "files")
		if r.code == 0 || !strings.Contains(r.stderr, "working dir: stat "+filepath.Join(src, "nope")+": no such file or directory") {
			t.Errorf("submit with a missing --working-dir: %s", r)
		}
	})

	t.Run("stop a long job; logs survive the client", func(t *testing.T) {
		marker := fmt.Sprintf("jobs-%d-%d", os.Getpid(), time.Now().UnixNano())
		client := exec.Command(gorayBin, append(append([]string{"job", "submit", "--submission-id", "hold"}, local...),
			"--env", markerEnv+"="+marker, "--env", "GORAY_FORWARD_ENV="+markerEnv, "--", testjobBin, "job-hold", worker.id)...)
		client.Env = baseEnv()
		var out syncBuffer
		client.Stdout, client.Stderr = &out, &out
		if err := client.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = client.Wait(); close(exited) }()
		t.Cleanup(func() { _ = client.Process.Kill(); <-exited })
		waitFor(t, 60*time.Second, "the long job's output through the submitting client", func() bool {
			return strings.Contains(out.String(), "job-hold: ready")
		})
		// The client dies; the job does not.
		if err := client.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-exited
		j := jobStatus(t, ctx, envDash, "hold")
		if j.Status != jobs.StatusRunning {
			t.Fatalf("after the client died the job is %s (%s)", j.Status, j.Message)
		}
		workers := func(p proc) bool {
			return p.hasEnv(markerEnv+"="+marker) && p.hasEnv("GORAY_WORKER=1") && p.hasEnv("GORAY_NODE_ID="+worker.id)
		}
		if len(findProcs(workers)) == 0 {
			t.Fatalf("the job runs no worker on node %s", worker.id[:8])
		}
		r := runGoray(t, ctx, append([]string{"job", "logs", "hold"}, local...)...)
		if r.code != 0 {
			t.Fatalf("goray job logs: %s", r)
		}
		wantLines(t, r.stdout, "job-hold: actor pid", "job-hold: ready")

		r = runGoray(t, ctx, append([]string{"job", "stop", "--wait", "hold"}, local...)...)
		if r.code != 0 || !strings.Contains(r.stdout, "Job hold STOPPED: stopped by request") {
			t.Fatalf("goray job stop --wait: %s", r)
		}
		j = jobStatus(t, ctx, envDash, "hold")
		if j.Status != jobs.StatusStopped || alive(j.DriverPid) {
			t.Fatalf("stopped job: %+v (driver alive: %v)", j, alive(j.DriverPid))
		}
		waitNoProcs(t, 30*time.Second, "the stopped job's workers on node "+worker.id[:8], workers)
		waitNoProcs(t, 10*time.Second, "the stopped job's processes", func(p proc) bool { return p.hasEnv(markerEnv + "=" + marker) })
		// The whole log is still there.
		r = runGoray(t, ctx, append([]string{"job", "logs", "hold"}, local...)...)
		wantLines(t, r.stdout, "job-hold: actor pid", "job-hold: ready")
	})

	t.Run("list", func(t *testing.T) {
		r := runGoray(t, ctx, append([]string{"job", "list", "--json"}, local...)...)
		var l jobs.ListResponse
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &l) != nil || len(l.Jobs) != 5 {
			t.Fatalf("goray job list --json: %s", r)
		}
		want := map[string]jobs.Status{"quickstart-1": jobs.StatusSucceeded, "fails": jobs.StatusFailed, "wd": jobs.StatusSucceeded, "hold": jobs.StatusStopped}
		for _, j := range l.Jobs {
			if st, ok := want[j.SubmissionID]; ok && st != j.Status {
				t.Errorf("job %s is %s, want %s", j.SubmissionID, j.Status, st)
			}
		}
		r = runGoray(t, ctx, append([]string{"job", "list"}, local...)...)
		wantLines(t, r.stdout, "SUBMISSION ID", "quickstart-1", "SUCCEEDED", "fails", "FAILED", "hold", "STOPPED")
	})
}

// readToken reads the tests' cluster token.
func readToken(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(tokenPath)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestDocJobs runs the walk-through of docs/jobs.md: a head, the
// quickstart submitted and followed, submitted again without an upload,
// its status, logs and listing, a stop and a delete.
func TestDocJobs(t *testing.T) {
	d := newDocRun(t, testCtxFor(t, 3*time.Minute))
	out := d.runBlock("", "docs/jobs.md", "goray start --head --port 6380 --dashboard-port 8265", 0)
	wantLines(t, out[0].stdout, "dashboard:", "http://127.0.0.1:")
	wantLines(t, out[2].stdout, "all checks passed")
	wantLines(t, out[2].stderr, "Uploaded ", "SUCCEEDED")
	wantLines(t, out[3].stdout, "my-first-job")
	wantLines(t, out[3].stderr, "nothing uploaded")
	wantLines(t, out[4].stdout, "submission id:", "my-first-job", "metadata owner:", "me")
	wantLines(t, out[5].stdout, "all checks passed")
	wantLines(t, out[6].stdout, "SUBMISSION ID", "my-first-job", "SUCCEEDED")
	wantLines(t, out[8].stdout, "second")
	wantLines(t, out[9].stdout, "Deleted job my-first-job")
	d.checkNothingLeft()
}
