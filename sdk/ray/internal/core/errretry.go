package core

import (
	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Retries on application errors (Ray's retry_exceptions).
//
// A call made with TaskOptions.RetryErrors whose function returned an
// error or panicked (a reply with AppError) runs again when RetryErrors
// says so for that error and the call has a retry left: a task's
// MaxRetries, an actor call's MaxTaskRetries, the same budget its worker's
// failures draw on. The attempt is recorded FAILED in the task events and
// the next one queued; the task keeps its id and return objects, and the
// caller sees only the last attempt's outcome. RetryErrors runs in the
// caller's process, on the error as the caller would get it, outside the
// core worker's locks. A retried task goes to the head of its scheduling
// key's queue; a retried actor call to the head of its actor's queue of
// calls not sent yet, so calls sent after it may run before it (Ray's
// retried actor tasks are not ordered either). Generator calls and calls
// cancelled with ray.Cancel are not retried.

// retryOnError reports whether call rec, whose reply rep says its function
// failed, is to run again: it asks for retries on errors, has a retry
// left, and its RetryErrors takes the error.
func retryOnError(rec *taskRecord, rep *pb.TaskReply) bool {
	if rec == nil || rec.retryErr == nil || rec.stream != nil || rep.GetRet() == nil || !retriesLeft(rec) {
		return false
	}
	if codec.FormatOf(rep.GetRet().GetMetadata()) != codec.FormatError {
		return false
	}
	re, ok := decodeRemoteError(rep.GetRet().GetData()).(*RemoteError)
	return ok && rec.retryErr(re)
}

// retriedOnError returns the task of l's reply rep (an application error)
// when it is to run again (retryOnError), nil when not. It looks the task
// up under the submitter's lock and asks RetryErrors outside it.
func (s *submitter) retriedOnError(l *lease, tid ids.ID, rep *pb.TaskReply) *taskRecord {
	s.mu.Lock()
	rec := l.inflight[tid]
	s.mu.Unlock()
	if !retryOnError(rec, rep) {
		return nil
	}
	return rec
}

// requeueOnErrorLocked puts task rec, whose function failed (errType,
// errMsg), back at the head of its key's queue as its next attempt. s.mu
// must be held; the caller dispatches k.
func (s *submitter) requeueOnErrorLocked(rec *taskRecord, k *schedKey, errType, errMsg string) {
	s.nextAttemptLocked(rec, errType, errMsg+"; retrying")
	rec.worker, rec.node = nil, nil
	k.queue = append([]*taskRecord{rec}, k.queue...)
}

// requeueOnError puts actor call rec, whose method failed (errType,
// errMsg), back at the head of the calls not sent yet as its next attempt.
// It reports false when the actor is dead: the caller answers rec as it
// would have.
func (c *actorClient) requeueOnError(rec *taskRecord, errType, errMsg string) bool {
	cw := c.m.cw
	c.mu.Lock()
	if c.dead != nil {
		c.mu.Unlock()
		return false
	}
	cw.submitter.mu.Lock()
	cw.submitter.nextAttemptLocked(rec, errType, errMsg+"; retrying")
	rec.worker, rec.node = nil, nil
	cw.submitter.mu.Unlock()
	c.queue = append([]*taskRecord{rec}, c.queue...)
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		go c.run()
	}
	return true
}
