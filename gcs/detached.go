package gcs

import (
	"fmt"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Detached actors (Ray's lifetime="detached") are owned by the GCS: they
// are registered without an owner address, so no process's death and no
// node's death other than their own ends them, and their job's end does
// not either. The process that created one still runs its creation (and,
// while its job runs, its restarts): the GCS starts no worker itself. So:
//
//   - when its job finishes, an ALIVE detached actor lives on; one still
//     PENDING or RESTARTING dies, since nobody is left to create it;
//   - when its worker or node fails after its job finished, it dies even
//     with restarts left, saying why (actorFailedLocked).

// detachedRestartableLocked reports whether detached actor a can still be
// created again after a failure: its job, whose process creates it, runs
// (a job the GCS does not know is taken as running). s.mu must be held.
func (s *Server) detachedRestartableLocked(a *actorEntry) bool {
	j, ok := s.jobs[ids.MustFromBytes(a.info.GetJobId())]
	return !ok || j.GetState() != StateFinished
}

// jobOfDetachedFinishedLocked handles the end of detached actor a's job
// (why says how it ended): an ALIVE actor lives on, GCS-owned; one that
// was not created yet, or was being created again, dies. s.mu must be
// held.
func (s *Server) jobOfDetachedFinishedLocked(a *actorEntry, why string) {
	switch a.info.GetState() {
	case gorayv1.ActorState_ACTOR_STATE_ALIVE:
		s.log.Info("detached actor outlives its job", "actor", a.id.Short(), "name", a.info.GetName(), "namespace", a.info.GetNamespace(), "job", ids.MustFromBytes(a.info.GetJobId()).Short())
	case gorayv1.ActorState_ACTOR_STATE_PENDING, gorayv1.ActorState_ACTOR_STATE_RESTARTING:
		s.markActorDeadLocked(a, fmt.Sprintf("its job ended (%s) before the detached actor was created (or created again): its creating process runs the creation, so it must wait for Ready before it exits", why))
	}
}
