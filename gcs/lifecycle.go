package gcs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/goray-dev/goray/gcs/internal/store"
)

// A cluster's life in its storage. The meta table holds the cluster's id,
// its name and, once its head shut down in order (`goray stop`, `goray
// down`), when it ended. A GCS that starts on the storage (Open) then:
//
//   - starts a new cluster (new id, the stored tables discarded) when the
//     stored one ended cleanly, or when nothing is stored;
//   - resumes the stored one when it did not end cleanly: its head or GCS
//     crashed, was killed (`goray stop --force`, kill -9, the OOM killer)
//     or the machine lost power; a GCS the head restarts after its crash
//     always resumes (Storage.Resume);
//   - never resumes a cluster of another name: a head of cluster X on a
//     storage holding Y starts fresh when Y ended cleanly, and otherwise
//     fails with a ClusterMismatchError naming both;
//   - with Storage.Fresh, discards whatever is stored; with Storage.Resume,
//     resumes even a cluster that ended cleanly, and fails with a
//     NothingToResumeError when there is none.
//
// The end is written by End, which the head calls once its GCS stopped
// (it holds the bbolt file's lock until then): only an orderly shutdown of
// the head marks it, never a GCS that exits or dies on its own.

// Keys of the meta table.
const (
	metaClusterID   = "cluster_id"
	metaClusterName = "cluster_name"
	// metaEnded is the time (RFC 3339) the cluster's head ended it, in
	// order; absent while the cluster runs, and after a crash.
	metaEnded = "ended"
)

// DefaultClusterName is the name of a cluster whose head was given none
// (`goray start --head` without a cluster file or cluster_name), and of an
// embedded node's.
const DefaultClusterName = "default"

// maxClusterName bounds a cluster name, given or read back.
const maxClusterName = 64

// checkClusterName checks a cluster name: at most maxClusterName bytes of
// UTF-8 without control characters (config allows fewer).
func checkClusterName(name string) error {
	switch {
	case name == "":
		return errors.New("the cluster name is empty")
	case len(name) > maxClusterName:
		return fmt.Errorf("the cluster name is %d bytes long, more than %d", len(name), maxClusterName)
	case !utf8.ValidString(name):
		return errors.New("the cluster name is not UTF-8")
	case strings.ContainsFunc(name, unicode.IsControl):
		return errors.New("the cluster name holds a control character")
	}
	return nil
}

// clusterName is the name of the cluster the GCS serves.
func (st Storage) clusterName() string {
	if st.Cluster == "" {
		return DefaultClusterName
	}
	return st.Cluster
}

// ClusterMismatchError refuses to resume the cluster a storage holds for a
// head of another cluster: each cluster (a cluster file's cluster_name)
// keeps its own state.
type ClusterMismatchError struct {
	// Storage describes the storage ("bolt /var/lib/goray/gcs.db").
	Storage string
	// Stored and StoredID are the stored cluster's name and id; Wanted is
	// the name of the head's cluster.
	Stored, StoredID, Wanted string
	// Ended says the stored cluster ended cleanly (only a --resume of it
	// fails then: otherwise the head starts its own cluster).
	Ended bool
}

func (e *ClusterMismatchError) Error() string {
	what := "which did not end cleanly (its head crashed or was killed)"
	if e.Ended {
		what = "which ended cleanly"
	}
	return fmt.Sprintf("GCS storage %s holds cluster %q (%s), %s: a head of cluster %q does not resume another cluster's state. "+
		"Start cluster %q again to resume it, give cluster %q its own data directory or Redis prefix, or discard %q's state with --fresh (goray start --head --fresh, goray up --fresh)",
		e.Storage, e.Stored, shortID(e.StoredID), what, e.Wanted, e.Stored, e.Wanted, e.Stored)
}

// NothingToResumeError says a GCS told to resume (--resume) found no
// cluster in its storage.
type NothingToResumeError struct {
	// Storage describes the storage.
	Storage string
}

func (e *NothingToResumeError) Error() string {
	return fmt.Sprintf("--resume: GCS storage %s holds no cluster to resume; start without --resume for a new cluster", e.Storage)
}

// ErrNotStored is End's error when the storage does not hold the cluster
// it is to mark as ended (another cluster started on it, or it was wiped).
var ErrNotStored = errors.New("the cluster is not the one the GCS storage holds")

// shortID is the first 8 characters of a cluster id, as goray shows it.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// storedCluster is what the meta table says of the cluster it holds.
type storedCluster struct {
	id, name string // name "": stored before names were (taken as ours)
	ended    bool
}

// readStored reads the meta table's cluster; ok is false when none is
// stored. A name that fails checkClusterName counts as none (restore sets
// the record aside).
func readStored(meta map[string][]byte) (c storedCluster, ok bool) {
	id, ok := meta[metaClusterID]
	if !ok {
		return c, false
	}
	c.id = clip(string(id))
	if name, has := meta[metaClusterName]; has && checkClusterName(string(name)) == nil {
		c.name = string(name)
	}
	_, c.ended = meta[metaEnded]
	return c, true
}

// planStart decides, from the meta table, whether Open discards the
// stored cluster (wipe) or resumes it; discarded is the cluster wiped
// ("" for none stored). The rules are at the top of this file.
func planStart(st Storage, where string, meta map[string][]byte) (wipe bool, discarded storedCluster, err error) {
	want := st.clusterName()
	if err := checkClusterName(want); err != nil {
		return false, discarded, fmt.Errorf("GCS storage %s: %w", where, err)
	}
	if st.Fresh && st.Resume {
		return false, discarded, errors.New("--fresh and --resume contradict each other: give one")
	}
	c, stored := readStored(meta)
	switch {
	case st.Fresh:
		return true, c, nil
	case !stored:
		if st.Resume {
			return false, c, &NothingToResumeError{Storage: where}
		}
		return true, c, nil // nothing to keep; clear what a partial write left
	case c.name != "" && c.name != want:
		if c.ended && !st.Resume {
			return true, c, nil
		}
		return false, c, &ClusterMismatchError{Storage: where, Stored: c.name, StoredID: c.id, Wanted: want, Ended: c.ended}
	case c.ended && !st.Resume:
		return true, c, nil
	}
	return false, c, nil
}

// claimMeta is the batch that makes the storage the running cluster's:
// its id (when new), its name, and no end.
func claimMeta(clusterID, name string, newID bool) []store.Write {
	batch := []store.Write{
		{Table: tableMeta, Key: metaClusterName, Value: []byte(name)},
		{Table: tableMeta, Key: metaEnded, Delete: true},
	}
	if newID {
		batch = append(batch, store.Write{Table: tableMeta, Key: metaClusterID, Value: []byte(clusterID)})
	}
	return batch
}

// End marks the cluster clusterID, which storage st holds, as ended
// cleanly: the next GCS on the storage starts a new cluster unless told to
// resume (Storage.Resume). A head calls it when it shuts down in order,
// once its GCS stopped (the GCS holds the bbolt file's lock while it
// runs); the mark is durable when End returns. It fails with ErrNotStored
// when the storage holds another cluster, or none. A memory storage keeps
// nothing to mark.
func End(ctx context.Context, st Storage, clusterID string) error {
	s, err := openStore(ctx, st)
	if err != nil || s == nil {
		return err
	}
	defer s.Close()
	id, err := s.Get(ctx, tableMeta, metaClusterID)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("GCS storage %s: marking cluster %s ended: it holds no cluster: %w", s.Describe(), shortID(clusterID), ErrNotStored)
	}
	if err != nil {
		return fmt.Errorf("GCS storage %s: marking cluster %s ended: %w", s.Describe(), shortID(clusterID), err)
	}
	if string(id) != clusterID {
		return fmt.Errorf("GCS storage %s: marking cluster %s ended: it holds cluster %s: %w", s.Describe(), shortID(clusterID), shortID(clip(string(id))), ErrNotStored)
	}
	at := time.Now().UTC().Format(time.RFC3339Nano)
	if err := s.Put(ctx, tableMeta, map[string][]byte{metaEnded: []byte(at)}); err != nil {
		return fmt.Errorf("GCS storage %s: marking cluster %s ended: %w", s.Describe(), shortID(clusterID), err)
	}
	return nil
}
