package gcs

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goray-dev/goray/gcs/internal/store"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// TestPlanStart: what a GCS does with the cluster its storage holds, for
// each flag, stored name and end.
func TestPlanStart(t *testing.T) {
	const id = "0123456789abcdef"
	meta := func(name string, ended bool) map[string][]byte {
		m := map[string][]byte{metaClusterID: []byte(id)}
		if name != "" {
			m[metaClusterName] = []byte(name)
		}
		if ended {
			m[metaEnded] = []byte("2026-01-01T00:00:00Z")
		}
		return m
	}
	var (
		mismatch *ClusterMismatchError
		nothing  *NothingToResumeError
	)
	for _, c := range []struct {
		name     string
		st       Storage
		meta     map[string][]byte
		wipe     bool
		errAs    any
		errParts []string
	}{
		{name: "empty storage", meta: nil, wipe: true},
		{name: "crashed cluster resumes", meta: meta("default", false)},
		{name: "ended cluster is discarded", meta: meta("default", true), wipe: true},
		{name: "ended cluster with --resume", st: Storage{Resume: true}, meta: meta("default", true)},
		{name: "crashed cluster with --fresh", st: Storage{Fresh: true}, meta: meta("default", false), wipe: true},
		{name: "--resume on an empty storage", st: Storage{Resume: true}, errAs: &nothing, errParts: []string{"--resume", "holds no cluster", "bolt /x"}},
		{name: "stored before names resumes", meta: meta("", false)},
		{name: "named cluster resumes", st: Storage{Cluster: "demo"}, meta: meta("demo", false)},
		{name: "another cluster that ended", st: Storage{Cluster: "demo"}, meta: meta("lab", true), wipe: true},
		{name: "another cluster that crashed", st: Storage{Cluster: "demo"}, meta: meta("lab", false), errAs: &mismatch,
			errParts: []string{`holds cluster "lab" (01234567)`, "did not end cleanly", `a head of cluster "demo"`, "--fresh"}},
		{name: "--resume of another cluster", st: Storage{Cluster: "demo", Resume: true}, meta: meta("lab", true), errAs: &mismatch,
			errParts: []string{`holds cluster "lab"`, "ended cleanly", `cluster "demo"`}},
		{name: "--fresh on another cluster", st: Storage{Cluster: "demo", Fresh: true}, meta: meta("lab", false), wipe: true},
		{name: "both flags", st: Storage{Fresh: true, Resume: true}, errParts: []string{"--fresh and --resume"}},
		{name: "a bad name", st: Storage{Cluster: "a\nb"}, errParts: []string{"control character"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			wipe, _, err := planStart(c.st, "bolt /x", c.meta)
			if len(c.errParts) == 0 {
				if err != nil || wipe != c.wipe {
					t.Fatalf("planStart = wipe %v, %v; want wipe %v", wipe, err, c.wipe)
				}
				return
			}
			if err == nil {
				t.Fatalf("planStart = wipe %v, no error; want %q", wipe, c.errParts)
			}
			if c.errAs != nil && !errors.As(err, c.errAs) {
				t.Errorf("error %T %v, want %T", err, err, c.errAs)
			}
			for _, p := range c.errParts {
				if !strings.Contains(err.Error(), p) {
					t.Errorf("error %q does not say %q", err, p)
				}
			}
		})
	}
}

// TestClusterLifecycle, on bolt and a real Redis: a GCS closed without End
// (as one that crashed) is resumed by the next; after End the next starts
// a new cluster with empty tables, unless told to resume, which clears the
// end; a GCS of another cluster name does not resume the stored one.
func TestClusterLifecycle(t *testing.T) {
	for _, sc := range storages {
		t.Run(sc.name, func(t *testing.T) {
			st, _ := sc.make(t)
			open := func(st Storage) *Server {
				t.Helper()
				s, err := Open(ctxT(t), Options{Storage: st})
				mustOK(t, err)
				return s
			}
			// A job in each cluster, to see which tables come back.
			withJob := func(s *Server) {
				t.Helper()
				c, stop := serveOpened(t, s)
				_, err := c.AddJob(ctxT(t), &gorayv1.AddJobRequest{Job: &gorayv1.JobInfo{JobId: newID().Bytes(), BinaryPath: "/bin/x", BinarySha256: fmt.Sprintf("%064x", 7)}})
				mustOK(t, err)
				stop()
			}
			s := open(st)
			first := s.ClusterID()
			if s.Restored() || s.ClusterName() != DefaultClusterName {
				t.Fatalf("first GCS: restored %v, name %q", s.Restored(), s.ClusterName())
			}
			withJob(s)

			s = open(st) // the first one stopped without End: a crash
			if !s.Restored() || s.ClusterID() != first || len(s.jobs) != 1 || s.Discarded() != "" {
				t.Fatalf("after a crash: restored %v, cluster %s (want %s), %d jobs, discarded %q", s.Restored(), s.ClusterID(), first, len(s.jobs), s.Discarded())
			}
			mustOK(t, s.Close(ctxT(t)))
			if err := End(ctxT(t), st, newID().String()); !errors.Is(err, ErrNotStored) {
				t.Fatalf("End of another cluster id: %v, want ErrNotStored", err)
			}
			mustOK(t, End(ctxT(t), st, first))

			s = open(Storage{Backend: st.Backend, Path: st.Path, RedisAddress: st.RedisAddress, RedisPassword: st.RedisPassword, RedisPrefix: st.RedisPrefix, Cluster: "other"})
			if s.Restored() || s.ClusterID() == first || len(s.jobs) != 0 || s.Discarded() != first || s.ClusterName() != "other" {
				t.Fatalf("another cluster after a clean end: restored %v, cluster %s, %d jobs, discarded %q", s.Restored(), s.ClusterID(), len(s.jobs), s.Discarded())
			}
			other := s.ClusterID()
			mustOK(t, s.Close(ctxT(t)))
			// "other" did not end: the default cluster does not take it.
			_, err := Open(ctxT(t), Options{Storage: st})
			var mm *ClusterMismatchError
			if !errors.As(err, &mm) || mm.Stored != "other" || mm.Wanted != DefaultClusterName || mm.Ended {
				t.Fatalf("the default cluster on other's crashed state: %v, want a ClusterMismatchError", err)
			}
			mustOK(t, End(ctxT(t), st, other))

			s = open(st) // other ended: a new default cluster
			second := s.ClusterID()
			if s.Restored() || second == other || s.Discarded() != other {
				t.Fatalf("after other's clean end: restored %v, cluster %s, discarded %q", s.Restored(), second, s.Discarded())
			}
			withJob(s)
			mustOK(t, End(ctxT(t), st, second))

			resume := st
			resume.Resume = true
			s = open(resume) // --resume after a clean end
			if !s.Restored() || s.ClusterID() != second || len(s.jobs) != 1 {
				t.Fatalf("--resume after a clean end: restored %v, cluster %s (want %s), %d jobs", s.Restored(), s.ClusterID(), second, len(s.jobs))
			}
			mustOK(t, s.Close(ctxT(t)))
			s = open(st) // resumed, so running again: its crash resumes
			if !s.Restored() || s.ClusterID() != second {
				t.Fatalf("a crash after --resume: restored %v, cluster %s (want %s)", s.Restored(), s.ClusterID(), second)
			}
			mustOK(t, s.Close(ctxT(t)))

			fresh := st
			fresh.Fresh = true
			s = open(fresh) // --fresh after a crash
			if s.Restored() || s.ClusterID() == second || len(s.jobs) != 0 || s.Discarded() != second {
				t.Fatalf("--fresh after a crash: restored %v, cluster %s, %d jobs, discarded %q", s.Restored(), s.ClusterID(), len(s.jobs), s.Discarded())
			}
			mustOK(t, s.Close(ctxT(t)))
		})
	}
}

// TestResumeNothing: --resume on an empty storage, or on memory, fails
// saying there is nothing to resume.
func TestResumeNothing(t *testing.T) {
	for _, st := range []Storage{
		{Backend: BackendMemory, Resume: true},
		{Backend: BackendBolt, Path: t.TempDir() + "/gcs.db", Resume: true},
	} {
		_, err := Open(ctxT(t), Options{Storage: st})
		var nr *NothingToResumeError
		if !errors.As(err, &nr) || !strings.Contains(err.Error(), st.String()) {
			t.Errorf("%s: %v, want a NothingToResumeError naming it", st, err)
		}
	}
}

// TestStoredClusterNameChecked: a cluster name read back passes
// checkClusterName; one that does not is set aside, and the GCS takes the
// stored cluster as its own.
func TestStoredClusterNameChecked(t *testing.T) {
	st := keepOpen{store.NewMemory()}
	id := newID().String()
	mustOK(t, st.Put(ctxT(t), tableMeta, map[string][]byte{metaClusterID: []byte(id), metaClusterName: []byte(strings.Repeat("x", 65))}))
	s, err := openOn(ctxT(t), Options{}, st)
	mustOK(t, err)
	defer s.Close(ctxT(t))
	if !s.Restored() || s.ClusterID() != id {
		t.Fatalf("restored %v, cluster %s, want %s", s.Restored(), s.ClusterID(), id)
	}
	if q := quarantined(t, st, tableMeta, metaClusterName); q == nil || !strings.Contains(q.Reason, "65 bytes") {
		t.Fatalf("the 65-byte name is not set aside: %+v", q)
	}
	if name, err := st.Get(ctxT(t), tableMeta, metaClusterName); err != nil || string(name) != DefaultClusterName {
		t.Fatalf("stored name %q, %v; want %q", name, err, DefaultClusterName)
	}
}
