package gcs

import (
	"context"
	"fmt"

	"github.com/goray-dev/goray/internal/digest"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// AddJob records a job as RUNNING with the server's start time. Adding a
// running job again is a no-op; adding a finished one fails with
// JobFinishedError. A job must name its binary (binary_path) and the
// binary's sha256 (64 lowercase hex digits): raylets run only a binary
// with that hash, so a job without one is refused (InvalidArgumentError).
func (s *Server) AddJob(ctx context.Context, req *gorayv1.AddJobRequest) (_ *gorayv1.AddJobReply, err error) {
	var d durable
	defer d.wait(ctx, &err) // after the unlock below: answer once the change is durable
	if req.GetJob() == nil {
		return nil, &InvalidArgumentError{Field: "job", Problem: "required"}
	}
	id, err := checkJobInfo(req.GetJob())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, ok := s.jobs[id]; ok {
		if j.GetState() == StateFinished {
			return nil, &JobFinishedError{ID: id, Op: "add job"}
		}
		return &gorayv1.AddJobReply{}, nil
	}
	job := cloneMsg(req.GetJob())
	job.State = StateRunning
	job.StartTimeMs = s.nowMs()
	job.EndTimeMs = 0
	s.jobs[id] = job
	s.jobOrder = append(s.jobOrder, id)
	s.saveJobLocked(id, job)
	d = s.durableNow()
	s.log.Info("job added", "job", id.Short(), "binary", job.GetBinaryPath(), "pid", job.GetDriverPid())
	s.publishLocked(Event{Kind: EventJobAdded, Job: job})
	return &gorayv1.AddJobReply{}, nil
}

// checkJobInfo validates what AddJob is told of a job (and what a GCS
// reads back from its storage): its id, its driver's node id, its binary
// and the binary's hash. It returns the job's id.
func checkJobInfo(j *gorayv1.JobInfo) (ids.ID, error) {
	id, err := parseID("job.job_id", j.GetJobId())
	if err != nil {
		return ids.Nil, err
	}
	if _, err := parseOptionalID("job.driver_node_id", j.GetDriverNodeId()); err != nil {
		return ids.Nil, err
	}
	if j.GetBinaryPath() == "" {
		return ids.Nil, &InvalidArgumentError{Field: "job.binary_path", Problem: "required"}
	}
	if sum := j.GetBinarySha256(); !digest.ValidSHA256(sum) {
		return ids.Nil, &InvalidArgumentError{Field: "job.binary_sha256",
			Problem: fmt.Sprintf("%q is not a sha256 (64 lowercase hexadecimal digits); raylets run only a job binary whose hash they checked", sum)}
	}
	return id, nil
}

// MarkJobFinished marks the job FINISHED with the server's end time and kills
// every actor of the job with reason "job finished". Finishing a finished job
// is a no-op.
func (s *Server) MarkJobFinished(ctx context.Context, req *gorayv1.MarkJobFinishedRequest) (_ *gorayv1.MarkJobFinishedReply, err error) {
	var d durable
	defer d.wait(ctx, &err) // after the unlock below: answer once the change is durable
	id, err := parseID("job_id", req.GetJobId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.pruneHistoryLocked() // before the unlock, after the loops (history.go)
	job, ok := s.jobs[id]
	if !ok {
		return nil, &NotFoundError{Kind: "job", ID: id}
	}
	if job.GetState() == StateFinished {
		return &gorayv1.MarkJobFinishedReply{}, nil
	}
	s.finishJobLocked(id, job, "job finished")
	d = s.durableNow()
	return &gorayv1.MarkJobFinishedReply{}, nil
}

// finishJobLocked marks job FINISHED and kills its actors with reason
// (its detached actors live on: see jobOfDetachedFinishedLocked); s.mu
// must be held.
func (s *Server) finishJobLocked(id ids.ID, job *gorayv1.JobInfo, reason string) {
	job.State = StateFinished
	job.EndTimeMs = s.nowMs()
	s.hist.jobs.push(id)
	s.saveJobLocked(id, job)
	s.log.Info("job finished", "job", id.Short(), "reason", reason)
	s.publishLocked(Event{Kind: EventJobFinished, Job: job})
	for _, aid := range s.actorSeq {
		a := s.actors[aid]
		switch {
		case ids.MustFromBytes(a.info.GetJobId()) != id:
		case a.info.GetDetached():
			s.jobOfDetachedFinishedLocked(a, reason)
		default:
			s.markActorDeadLocked(a, reason)
		}
	}
}

// GetAllJobs returns every job in the order they were added. Each job's
// env (the variables its driver forwards to workers, which may hold
// secrets) is left out unless the request sets include_env, as raylets do
// to start the job's workers: listings never show it.
func (s *Server) GetAllJobs(_ context.Context, req *gorayv1.GetAllJobsRequest) (*gorayv1.GetAllJobsReply, error) {
	jobs := s.Jobs()
	if !req.GetIncludeEnv() {
		for _, j := range jobs {
			j.Env = nil
		}
	}
	return &gorayv1.GetAllJobsReply{Jobs: jobs}, nil
}
