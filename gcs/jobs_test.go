package gcs

import (
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc/codes"
)

func TestJobs(t *testing.T) {
	clock := newFakeClock()
	_, c := startServer(t, Options{Now: clock.Now})
	ctx := ctxT(t)
	j1, j2 := newID(), newID()
	start := clock.Now().UnixMilli()

	for _, j := range []ids.ID{j1, j2} {
		_, err := c.AddJob(ctx, &gorayv1.AddJobRequest{Job: &gorayv1.JobInfo{JobId: j.Bytes(), BinaryPath: "/bin/app", BinarySha256: testSHA, DriverPid: 10, State: "FINISHED", Env: []string{"AWS_SECRET_ACCESS_KEY=hunter2"}}})
		mustOK(t, err)
	}
	// Adding a running job again is a no-op.
	_, err := c.AddJob(ctx, &gorayv1.AddJobRequest{Job: &gorayv1.JobInfo{JobId: j1.Bytes(), BinaryPath: "/other", BinarySha256: testSHA}})
	mustOK(t, err)
	all, err := c.GetAllJobs(ctx, &gorayv1.GetAllJobsRequest{})
	mustOK(t, err)
	if len(all.GetJobs()) != 2 {
		t.Fatalf("GetAllJobs = %d jobs, want 2", len(all.GetJobs()))
	}
	for i, j := range all.GetJobs() {
		if j.GetState() != StateRunning || j.GetStartTimeMs() != start || j.GetBinaryPath() != "/bin/app" || j.GetDriverPid() != 10 {
			t.Fatalf("job %d = %v", i, j)
		}
		// A listing never shows what the driver forwards to its workers.
		if len(j.GetEnv()) != 0 {
			t.Fatalf("GetAllJobs without include_env returned job %d's env %q", i, j.GetEnv())
		}
	}
	// Raylets ask for it to start the job's workers.
	withEnv, err := c.GetAllJobs(ctx, &gorayv1.GetAllJobsRequest{IncludeEnv: true})
	mustOK(t, err)
	if env := withEnv.GetJobs()[0].GetEnv(); len(env) != 1 || env[0] != "AWS_SECRET_ACCESS_KEY=hunter2" {
		t.Fatalf("GetAllJobs with include_env: env = %q", env)
	}

	// Actors of j1 in every state, and one of j2.
	p, a, d, other := newID(), newID(), newID(), newID()
	registerActor(t, c, actorOn(p, j1, ids.Nil, ids.Nil, "named"))
	registerActor(t, c, actorOn(a, j1, ids.Nil, ids.Nil, ""))
	registerActor(t, c, actorOn(d, j1, ids.Nil, ids.Nil, ""))
	registerActor(t, c, actorOn(other, j2, ids.Nil, ids.Nil, ""))
	setState(t, c, a, alive, "")
	setState(t, c, d, dead, "exited")
	setState(t, c, other, alive, "")

	clock.Advance(time.Minute)
	_, err = c.MarkJobFinished(ctx, &gorayv1.MarkJobFinishedRequest{JobId: j1.Bytes()})
	mustOK(t, err)
	all, err = c.GetAllJobs(ctx, &gorayv1.GetAllJobsRequest{})
	mustOK(t, err)
	if got := all.GetJobs()[0]; got.GetState() != StateFinished || got.GetEndTimeMs() != clock.Now().UnixMilli() {
		t.Fatalf("finished job = %v", got)
	}
	if got := all.GetJobs()[1]; got.GetState() != StateRunning {
		t.Fatalf("other job = %v", got)
	}

	for _, tc := range []struct {
		name   string
		id     ids.ID
		state  gorayv1.ActorState
		reason string
	}{
		{"pending", p, dead, "job finished"},
		{"alive", a, dead, "job finished"},
		{"already dead", d, dead, "exited"},
		{"other job", other, alive, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := getActor(t, c, tc.id)
			if got.GetState() != tc.state || got.GetDeathReason() != tc.reason {
				t.Fatalf("got %v %q, want %v %q", got.GetState(), got.GetDeathReason(), tc.state, tc.reason)
			}
		})
	}

	// Finishing again is a no-op; unknown jobs are NotFound.
	clock.Advance(time.Minute)
	_, err = c.MarkJobFinished(ctx, &gorayv1.MarkJobFinishedRequest{JobId: j1.Bytes()})
	mustOK(t, err)
	if got := getJob(t, c, j1); got.GetEndTimeMs() != clock.Now().Add(-time.Minute).UnixMilli() {
		t.Fatalf("second finish changed end time: %v", got)
	}
	_, err = c.MarkJobFinished(ctx, &gorayv1.MarkJobFinishedRequest{JobId: newID().Bytes()})
	wantCode(t, err, codes.NotFound, "no job with id")

	// A finished job takes no new actors and cannot be re-added.
	_, err = c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: actorOn(newID(), j1, ids.Nil, ids.Nil, "")})
	wantCode(t, err, codes.FailedPrecondition, "has finished")
	_, err = c.AddJob(ctx, &gorayv1.AddJobRequest{Job: jobOf(j1)})
	wantCode(t, err, codes.FailedPrecondition, "has finished")
	// The name held by the job's actor is free again.
	registerActor(t, c, actorOn(newID(), j2, ids.Nil, ids.Nil, "named"))
}

func getJob(t *testing.T, c gorayv1.GcsClient, id ids.ID) *gorayv1.JobInfo {
	t.Helper()
	all, err := c.GetAllJobs(ctxT(t), &gorayv1.GetAllJobsRequest{})
	mustOK(t, err)
	for _, j := range all.GetJobs() {
		if ids.MustFromBytes(j.GetJobId()) == id {
			return j
		}
	}
	t.Fatalf("job %s not found", id.Short())
	return nil
}

// testSHA is a well-formed binary sha256 for jobs of these tests.
const testSHA = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

// jobOf is a well-formed job with id.
func jobOf(id ids.ID) *gorayv1.JobInfo {
	return &gorayv1.JobInfo{JobId: id.Bytes(), BinaryPath: "/bin/app", BinarySha256: testSHA}
}

// TestAddJobNeedsBinaryHash: a job that does not name its binary's sha256
// (an empty hash once passed for an "older driver", letting any caller have
// raylets run a program of its choosing) is refused, naming the field, and
// never recorded.
func TestAddJobNeedsBinaryHash(t *testing.T) {
	_, c := startServer(t, Options{})
	ctx := ctxT(t)
	for _, tc := range []struct {
		name, path, sum, want string
	}{
		{"empty sha256", "/usr/bin/id", "", "job.binary_sha256"},
		{"short sha256", "/usr/bin/id", testSHA[:40], "job.binary_sha256"},
		{"uppercase sha256", "/usr/bin/id", strings.ToUpper(testSHA), "job.binary_sha256"},
		{"not hex", "/usr/bin/id", "../../" + testSHA[6:], "job.binary_sha256"},
		{"no binary path", "", testSHA, "job.binary_path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.AddJob(ctx, &gorayv1.AddJobRequest{Job: &gorayv1.JobInfo{JobId: newID().Bytes(), BinaryPath: tc.path, BinarySha256: tc.sum}})
			wantCode(t, err, codes.InvalidArgument, tc.want)
		})
	}
	all, err := c.GetAllJobs(ctx, &gorayv1.GetAllJobsRequest{IncludeEnv: true})
	mustOK(t, err)
	if len(all.GetJobs()) != 0 {
		t.Fatalf("refused jobs were recorded: %v", all.GetJobs())
	}
}
