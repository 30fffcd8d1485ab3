// Package spill is the raylet's spiller: it moves primary copies of
// objects from the node's store to storage (a storage plugin, or local disk)
// when the store fills up, fusing small objects into files, restores them
// when they are read, and, with shared storage, records each spilled
// object in the GCS so that another node can restore it after this node
// died. A node that drains before it is terminated moves every primary
// copy to shared storage (SpillAll) and keeps the files when it stops.
package spill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sync/errgroup"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/sdk/storage"
)

// gcsTimeout bounds GCS calls.
const gcsTimeout = 5 * time.Second

// Entry describes one object of the node's store: what the spiller needs
// to know of it (raylet.StoreEntry is this type).
type Entry struct {
	ID       ids.ObjectID
	Found    bool
	Offset   int64
	DataSize int64
	Metadata []byte
	Pins     int
	Sealed   bool
	// Freed (ListEntries only): freed, reclaimed at the last release.
	Freed bool
	// Seq orders objects by creation (larger is newer).
	Seq int64
}

// Store is the node's object store as the spiller uses it.
type Store interface {
	// ListEntries lists every object.
	ListEntries() []Entry
	// GetEntries looks objects up, pinning the found ones for client.
	GetEntries(objs []ids.ObjectID, client ids.ID) []Entry
	// Release drops client's pins on objs.
	Release(objs []ids.ObjectID, client ids.ID)
	// Free deletes objs (once unpinned).
	Free(objs []ids.ObjectID)
	// Usage reports the bytes in use and the capacity.
	Usage() (used, capacity int64)
	// Capacity is the arena size in bytes.
	Capacity() int64
	// Contains reports whether the object exists (sealed or not).
	Contains(id ids.ObjectID) bool
	// Data returns the arena bytes [offset, offset+size).
	Data(offset, size int64) []byte
	// Seal makes an object immutable; with release the creator's pin is
	// dropped.
	Seal(id ids.ObjectID, client ids.ID, release bool) error
	// Abort discards an unsealed object.
	Abort(id ids.ObjectID) error
}

// Objects is what the spiller needs from the node's object bookkeeping.
// The spiller calls it with its lock released.
type Objects interface {
	// Primaries reports which objects are primary copies: created on this
	// node, not freed by their owner.
	Primaries(objs []ids.ObjectID) []bool
	// Alive reports which objects their owners have not freed.
	Alive(objs []ids.ObjectID) []bool
	// EvictSecondaries frees unpinned copies of other nodes' objects until
	// need bytes are free, and returns the bytes freed.
	EvictSecondaries(need int64) int64
	// CreateMakingRoom creates an object, making room when it does not
	// fit.
	CreateMakingRoom(ctx context.Context, oid ids.ObjectID, size int64, meta []byte, creator ids.ID) (int64, error)
	// Track records that owner owns the primary copy oid.
	Track(oid ids.ObjectID, owner *gorayv1.Address)
}

// Spilling defaults (see Config).
const (
	// DefaultThreshold is Config.Threshold's default.
	DefaultThreshold = 0.8
	// DefaultMinFileSize is Config.MinFileSize's default.
	DefaultMinFileSize = 100 << 20
	// DefaultMaxObjectsPerFile is Config.MaxObjectsPerFile's default.
	DefaultMaxObjectsPerFile = 1000
	// DefaultWait is Config.Wait's default.
	DefaultWait = 60 * time.Second
	// spillCheck is how often usage is compared with the threshold.
	spillCheck = 100 * time.Millisecond
	// spillBackoffMax caps the wait between failed spill attempts.
	spillBackoffMax = 5 * time.Second
)

// Config configures spilling primary copies of objects to storage when
// the store fills up, and restoring them when they are read.
type Config struct {
	// Storage returns the backend (a storage plugin's client, which may
	// change when the plugin restarts); nil turns spilling off.
	Storage func() (storage.Storage, error)
	// Location names the backend for status output.
	Location string
	// Threshold is the fraction of the store above which objects spill
	// (default 0.8).
	Threshold float64
	// MinFileSize: small objects are fused into files of at least this
	// many bytes when there are enough (default 100 MiB).
	MinFileSize int64
	// MaxObjectsPerFile caps the objects fused into one file (default
	// 1000).
	MaxObjectsPerFile int
	// KeepFiles keeps the stored files when the node shuts down.
	KeepFiles bool
	// Wait is how long a create that does not fit waits for spilling to
	// make room before it fails (default 60s; the caller's deadline too).
	Wait time.Duration
	// Prefix starts every key this node writes ("<session>/<node id>/").
	Prefix string
	// ArenaPath, when set, is a path a storage plugin can open to map the
	// store's arena (/proc/<pid>/fd/<memfd>): restores then have the plugin
	// write straight into the arena (storage.ReaderInto).
	ArenaPath string
	// Shared names the storage plugin when every node can read what this
	// node stores ("" for node-local storage). Each spilled object is then
	// recorded in the GCS (node, object → plugin, file, range), so that
	// after this node dies another node spilling to the same plugin
	// restores the object from storage instead of losing it.
	Shared string
	// Observer, when set, is told of each file spilled and each object
	// restored (the node's metrics).
	Observer Observer
}

// Observer is told how long spills and restores take.
type Observer interface {
	// ObserveSpill: a file of bytes was written in took.
	ObserveSpill(bytes int64, took time.Duration)
	// ObserveRestore: an object of bytes was restored in took.
	ObserveRestore(bytes int64, took time.Duration)
}

// spillRecordNS is the GCS KV namespace of the spill records; keys are
// recordKey(node, object).
const spillRecordNS = "spill"

// spillRecord says where a node spilled an object, for other nodes.
type spillRecord struct {
	Storage string `json:"storage"`
	Key     string `json:"key"`
	URL     string `json:"url"`
	Offset  int64  `json:"offset"`
	Size    int64  `json:"size"`
	Meta    []byte `json:"meta,omitempty"`
}

func recordKey(node ids.ID, oid ids.ObjectID) string { return node.String() + "/" + oid.String() }

// ErrNoSpilledCopy says no node recorded a spilled copy of the object.
var ErrNoSpilledCopy = errors.New("no spilled copy was recorded")

// spillFile is one stored file of fused objects.
type spillFile struct {
	key, url string
	size     int64
	live     int // objects of the file not freed yet
	// foreign: a dead node's file this node restored objects from; never
	// deleted here (other nodes may still need it).
	foreign bool
}

// spilledObject is where an object's bytes are stored.
type spilledObject struct {
	file         *spillFile
	offset, size int64
	meta         []byte
	// inMemory is set while a restored copy is also in the store.
	inMemory bool
	// record is the object's GCS spill record key ("" for none): under
	// this node, or under the dead node whose copy this node restored.
	record string
	// handover is the record a draining node made under its own id for a
	// copy it restored from a dead node's record ("" for none).
	handover string
}

// recordedHere reports whether so (object id) is recorded in the GCS
// under node: another node restores it from storage once node is gone.
func (so *spilledObject) recordedHere(node ids.ID, id ids.ObjectID) bool {
	return so.handover != "" || so.record != "" && so.record == recordKey(node, id)
}

// records returns the GCS record keys of so.
func (so *spilledObject) records() []string {
	var out []string
	for _, r := range []string{so.record, so.handover} {
		if r != "" {
			out = append(out, r)
		}
	}
	return out
}

// restore is a restore of an object in flight. Guarded by Spiller.mu but
// for done.
type restore struct {
	done chan struct{}
	err  error
	// creator creates the restored object and pins it while held.
	creator ids.ID
	held    bool
	// waiters counts the readers waiting for it that have not pinned the
	// object yet.
	waiters int
}

// Spiller spills and restores the primary copies of a node's objects.
//
// mu guards objs, files, busy, restores, seq, need, progress, failing,
// lastFreed and stats. The spiller asks its Objects which objects are
// primary or still alive, and has them make room, only with mu released;
// it calls the storage and the GCS with mu released too. The store's
// pins and frees that must be atomic with its records (Pin, and releasing
// spilled objects' memory) are made with mu held: the store's lock is
// below mu (the store never calls the spiller).
// round serialises spill rounds (Run's and SpillAll's), so that no object
// is picked by two at once; it is held across the storage and GCS calls
// of a round, and only spill rounds take it.
type Spiller struct {
	cfg     Config
	nodeID  ids.ID
	store   Store
	objects Objects
	gcs     gorayv1.GcsClient
	log     hclog.Logger

	round sync.Mutex
	// draining: the node drains; DeleteAll keeps what other nodes need.
	draining atomic.Bool

	mu       sync.Mutex
	objs     map[ids.ObjectID]*spilledObject
	files    map[string]*spillFile
	busy     map[ids.ObjectID]bool // being written
	restores map[ids.ObjectID]*restore
	seq      int
	need     int64         // bytes a waiting create needs
	progress chan struct{} // closed and replaced after every spill attempt
	kick     chan struct{}
	failing  error
	// lastFreed is what the last spill round freed.
	lastFreed int64
	// noReadInto is set once the plugin answered that it cannot ReadInto.
	noReadInto atomic.Bool
	stats      gorayv1.SpillStats
}

// New returns the spiller of node nodeID's store (its objects' ownership
// kept by objects); gcs (nil: none) records spilled objects of shared
// storage. Spilling is off when cfg.Storage is nil.
func New(cfg Config, nodeID ids.ID, store Store, objects Objects, gcs gorayv1.GcsClient, log hclog.Logger) *Spiller {
	if cfg.Threshold <= 0 || cfg.Threshold > 1 {
		cfg.Threshold = DefaultThreshold
	}
	if cfg.MinFileSize <= 0 {
		cfg.MinFileSize = DefaultMinFileSize
	}
	if cfg.MaxObjectsPerFile <= 0 {
		cfg.MaxObjectsPerFile = DefaultMaxObjectsPerFile
	}
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	return &Spiller{
		cfg: cfg, nodeID: nodeID, store: store, objects: objects, gcs: gcs, log: log,
		objs: map[ids.ObjectID]*spilledObject{}, files: map[string]*spillFile{},
		busy: map[ids.ObjectID]bool{}, restores: map[ids.ObjectID]*restore{},
		progress: make(chan struct{}), kick: make(chan struct{}, 1),
	}
}

// Enabled reports whether spilling is on (a nil Spiller is off).
func (s *Spiller) Enabled() bool { return s != nil && s.cfg.Storage != nil }

// Run spills whenever the store is above the threshold or a create waits
// for room, backing off while the storage fails, until ctx ends.
func (s *Spiller) Run(ctx context.Context) {
	t := time.NewTicker(spillCheck)
	defer t.Stop()
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
		for {
			used, capacity := s.store.Usage()
			s.mu.Lock()
			need := s.need
			s.mu.Unlock()
			over := used - int64(s.cfg.Threshold*float64(capacity))
			if over <= 0 && need <= 0 {
				break
			}
			freed, err := s.spillOnce(ctx, max(over, need, 1))
			s.signal(freed, err)
			if err != nil {
				s.log.Warn("spilling objects failed; retrying", "error", err, "retry_in", backoff)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, spillBackoffMax)
				continue
			}
			backoff = 100 * time.Millisecond
			if freed == 0 {
				break // nothing more to spill
			}
		}
	}
}

// signal wakes the creates waiting for room and records the outcome.
func (s *Spiller) signal(freed int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = err
	s.lastFreed = freed
	close(s.progress)
	s.progress = make(chan struct{})
}

// candidate is an object that may leave memory.
type candidate struct {
	id   ids.ObjectID
	size int64
	meta []byte
	// stored: a restored copy whose bytes are still in storage, freed
	// without writing.
	stored bool
}

// candidates lists sealed, unpinned primary copies, oldest id first.
func (s *Spiller) candidates() []candidate {
	// Oldest first, as Ray does: the newest objects are the likeliest to
	// be read soon.
	entries := s.store.ListEntries()
	sort.Slice(entries, func(i, j int) bool { return entries[i].Seq < entries[j].Seq })
	oids := make([]ids.ObjectID, len(entries))
	for i, e := range entries {
		oids[i] = e.ID
	}
	primary := s.objects.Primaries(oids)
	var out []candidate
	s.mu.Lock()
	for i, e := range entries {
		if !e.Sealed || e.Freed || e.Pins > 0 || e.DataSize == 0 || s.busy[e.ID] || !primary[i] {
			continue
		}
		so := s.objs[e.ID]
		out = append(out, candidate{id: e.ID, size: e.DataSize, meta: e.Metadata, stored: so != nil && so.inMemory})
	}
	s.mu.Unlock()
	return out
}

// spillOnce frees at least need bytes of memory if it can: restored
// copies whose bytes are still stored first (no write), then one file of
// fused objects. It returns the bytes freed.
func (s *Spiller) spillOnce(ctx context.Context, need int64) (int64, error) {
	s.round.Lock()
	defer s.round.Unlock()
	// Copies of other nodes' objects go first: dropping them loses nothing.
	freed := s.objects.EvictSecondaries(need)
	if freed >= need {
		return freed, nil
	}
	cands := s.candidates()
	var drop []ids.ObjectID
	var batch []candidate
	var batchBytes int64
	for _, c := range cands {
		if c.stored {
			drop = append(drop, c.id)
			freed += c.size
		}
	}
	for _, c := range cands {
		if c.stored {
			continue
		}
		if freed+batchBytes >= need && batchBytes >= s.cfg.MinFileSize {
			break
		}
		if len(batch) == s.cfg.MaxObjectsPerFile {
			break
		}
		batch = append(batch, c)
		batchBytes += c.size
	}
	if len(drop) > 0 {
		freed -= s.dropStored(drop, cands)
	}
	if len(batch) == 0 {
		return freed, nil
	}
	n, _, err := s.writeFile(ctx, batch)
	return freed + n, err
}

// dropStored frees from memory the restored copies among drop whose
// bytes are still stored and that no reader pins (atomically with Pin), and
// returns the bytes of those it could not drop (pinned or gone meanwhile).
func (s *Spiller) dropStored(drop []ids.ObjectID, cands []candidate) int64 {
	size := make(map[ids.ObjectID]int64, len(cands))
	for _, c := range cands {
		size[c.id] = c.size
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var still []ids.ObjectID
	for _, id := range drop {
		if so := s.objs[id]; so != nil && so.inMemory {
			still = append(still, id)
		}
	}
	idle := s.freeIdleLocked(still)
	var kept int64
	for _, id := range drop {
		if idle[id].freed {
			s.objs[id].inMemory = false
		} else {
			kept += size[id]
		}
	}
	return kept
}

// writeFile writes the objects into one stored file, then releases them
// from memory: those a reader pinned meanwhile stay in memory as well
// (their stored copy is dropped later without writing). Objects freed
// meanwhile are not recorded. It returns the bytes written and the number
// of objects that left memory.
func (s *Spiller) writeFile(ctx context.Context, batch []candidate) (int64, int, error) {
	st, err := s.cfg.Storage()
	if err != nil {
		return 0, 0, fmt.Errorf("spill storage %s: %w", s.cfg.Location, err)
	}
	client := ids.New()
	objs := make([]ids.ObjectID, len(batch))
	for i, c := range batch {
		objs[i] = c.id
	}
	entries := s.store.GetEntries(objs, client) // pinned while written
	released := false
	defer func() {
		if !released {
			s.store.Release(objs, client)
		}
	}()
	var parts []io.Reader
	var offsets []int64
	var total int64
	var pinned []candidate
	for i, e := range entries {
		if !e.Found {
			continue // freed meanwhile
		}
		parts = append(parts, bytes.NewReader(s.store.Data(e.Offset, e.DataSize)))
		offsets = append(offsets, total)
		total += e.DataSize
		pinned = append(pinned, batch[i])
	}
	if len(pinned) == 0 {
		return 0, 0, nil
	}
	s.mu.Lock()
	s.seq++
	key := fmt.Sprintf("%s%06d.spill", s.cfg.Prefix, s.seq)
	for _, c := range pinned {
		s.busy[c.id] = true
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		for _, c := range pinned {
			delete(s.busy, c.id)
		}
		s.mu.Unlock()
	}()
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	rep, err := st.Write(wctx, &storage.WriteRequest{Key: key, Size: total, Body: io.MultiReader(parts...)})
	if err != nil {
		return 0, 0, fmt.Errorf("writing %d objects (%d bytes) to %s: %w", len(pinned), total, s.cfg.Location, err)
	}
	took := time.Since(start)
	// Stored: tell the cluster where (shared storage), record, then let
	// the memory go. An object the owner freed while it was written is not
	// recorded.
	records := s.publish(ctx, key, rep.URL, pinned, offsets)
	f := &spillFile{key: key, url: rep.URL, size: total}
	var release []ids.ObjectID
	var unrecord []string
	oids := make([]ids.ObjectID, len(pinned))
	for i, c := range pinned {
		oids[i] = c.id
	}
	alive := s.objects.Alive(oids)
	s.mu.Lock()
	// What follows is atomic with Pin: a reader that pinned an object
	// meanwhile keeps it in memory (with its stored copy, dropped later
	// without writing); one that comes after finds it stored.
	s.store.Release(objs, client)
	released = true
	var live []ids.ObjectID
	for i, id := range oids {
		if alive[i] {
			live = append(live, id)
		}
	}
	idle := s.freeIdleLocked(live)
	for i, c := range pinned {
		st := idle[c.id]
		if !alive[i] || !st.found {
			// Freed by its owner meanwhile: not recorded.
			if records[i] != "" {
				unrecord = append(unrecord, records[i])
			}
			continue
		}
		s.objs[c.id] = &spilledObject{file: f, offset: offsets[i], size: c.size, meta: c.meta, record: records[i], inMemory: !st.freed}
		f.live++
		if st.freed {
			release = append(release, c.id)
		}
	}
	s.files[key] = f
	s.stats.SpilledBytes += total
	s.stats.SpilledObjects += int64(len(pinned))
	s.stats.SpillSeconds += took.Seconds()
	if s.cfg.Observer != nil {
		s.cfg.Observer.ObserveSpill(total, took)
	}
	empty := f.live == 0
	if empty {
		delete(s.files, key)
	}
	s.mu.Unlock()
	if empty {
		s.deleteFiles([]string{key})
	}
	if len(unrecord) > 0 {
		go s.unpublish(unrecord)
	}
	s.log.Debug("objects spilled", "objects", len(release), "bytes", total, "read meanwhile", len(pinned)-len(release), "url", rep.URL, "took", took)
	// The bytes written count as progress even when readers kept some in
	// memory: their stored copies are dropped without writing once unpinned.
	return total, len(release), nil
}

// idleState is what freeIdleLocked found of one object.
type idleState struct {
	// found: the object is in the store, sealed and not freed.
	found bool
	// freed: nobody pinned it, so it left memory.
	freed bool
}

// freeIdleLocked frees from the store the objects no reader pins, and
// reports for each object whether it was found and whether it was freed.
// Requires s.mu: Pin takes its pins under s.mu too, so no reader pins an
// object between the check and the free (the store's lock is below s.mu:
// the store never calls the spiller).
func (s *Spiller) freeIdleLocked(objs []ids.ObjectID) map[ids.ObjectID]idleState {
	out := make(map[ids.ObjectID]idleState, len(objs))
	if len(objs) == 0 {
		return out
	}
	probe := ids.New()
	var pinned, free []ids.ObjectID
	for i, e := range s.store.GetEntries(objs, probe) {
		if !e.Found {
			continue
		}
		pinned = append(pinned, objs[i])
		st := idleState{found: true}
		if e.Pins <= 1 { // the probe's own
			st.freed = true
			free = append(free, objs[i])
		}
		out[objs[i]] = st
	}
	// The probe's pins go first: an object freed while pinned would hold
	// its id, and a create of it (a pull, which does not take s.mu) would
	// fail with "already exists".
	s.store.Release(pinned, probe)
	s.store.Free(free)
	return out
}

// FreeIdle frees from the store the objects among objs that no reader
// pins, atomically with Pin, and returns them: an object a reader pinned
// meanwhile stays (freed while pinned, it would be invisible to the next
// reader and yet block a create of its id, such as a pull of it again,
// with "already exists"). The object manager evicts copies of other
// nodes' objects through it.
func (s *Spiller) FreeIdle(objs []ids.ObjectID) []ids.ObjectID {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ids.ObjectID
	for id, st := range s.freeIdleLocked(objs) {
		if st.freed {
			out = append(out, id)
		}
	}
	return out
}

// WaitForRoom makes room for a create of size bytes: it asks the spill
// loop for it and waits for progress until the create fits, ctx ends, or
// the wait bound passes. It returns the last spill error, if any.
func (s *Spiller) WaitForRoom(ctx context.Context, size int64, try func() error) error {
	if size > s.store.Capacity() {
		return fmt.Errorf("the object (%d bytes) is larger than the whole store (%d bytes)", size, s.store.Capacity())
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Wait)
	defer cancel()
	s.mu.Lock()
	s.need += size
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.need -= size
		s.mu.Unlock()
	}()
	for {
		s.mu.Lock()
		progress := s.progress
		s.mu.Unlock()
		select {
		case s.kick <- struct{}{}:
		default:
		}
		select {
		case <-progress:
		case <-ctx.Done():
			s.mu.Lock()
			failing := s.failing
			s.mu.Unlock()
			if failing != nil {
				return fmt.Errorf("spilling is failing because %w", failing)
			}
			return fmt.Errorf("spilling could not make room within %s: %w", s.cfg.Wait, ctx.Err())
		}
		err := try()
		if err == nil {
			return nil
		}
		s.mu.Lock()
		stuck := s.failing == nil && s.lastFreed == 0
		s.mu.Unlock()
		if stuck {
			// A round that worked but found nothing to spill: the rest is
			// in use (pinned by readers) or not spillable.
			return errors.New("nothing more can be spilled: the objects in memory are in use")
		}
	}
}

// Has reports whether the object's bytes are stored (and not in memory).
func (s *Spiller) Has(id ids.ObjectID) bool {
	if !s.Enabled() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	so := s.objs[id]
	return so != nil
}

// RestoreError says a spilled object could not be restored.
type RestoreError struct {
	ID  ids.ObjectID
	Err error
}

// Error implements error.
func (e *RestoreError) Error() string {
	return fmt.Sprintf("object %s is spilled and could not be restored: %v", e.ID, e.Err)
}

// Unwrap returns the cause (the storage's error, or the reader's context's).
func (e *RestoreError) Unwrap() error { return e.Err }

// Restore brings a spilled object back into the store (concurrent
// restores of one object share the work). It is a no-op for objects that
// are in memory or not spilled.
func (s *Spiller) Restore(ctx context.Context, id ids.ObjectID) error {
	client := ids.New()
	es, err := s.Pin(ctx, []ids.ObjectID{id}, client)
	if err != nil {
		return err
	}
	if es[0].Found {
		s.store.Release([]ids.ObjectID{id}, client)
	}
	return nil
}

// Pin looks objects up in the store as its GetEntries does, pinning the
// found ones for client, and first restores those that are spilled: the
// read path of every reader of the node's objects. It is atomic with the
// spiller: an object the spiller writes or drops meanwhile is either
// pinned in memory (and then stays there) or found stored and restored;
// a restored object is pinned for every reader that waited for it before
// anything can spill it again. So a live object never reads as missing.
// On an error no pin is left; the error is a *RestoreError.
func (s *Spiller) Pin(ctx context.Context, objs []ids.ObjectID, client ids.ID) ([]Entry, error) {
	if !s.Enabled() {
		// Nothing is stored, but pins stay atomic with FreeIdle.
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.store.GetEntries(objs, client), nil
	}
	out := make([]Entry, len(objs))
	for i, id := range objs {
		e, err := s.pinOne(ctx, id, client)
		if err != nil {
			var got []ids.ObjectID
			for _, p := range out[:i] {
				if p.Found {
					got = append(got, p.ID)
				}
			}
			s.store.Release(got, client)
			return nil, &RestoreError{ID: id, Err: err}
		}
		out[i] = e
	}
	return out, nil
}

// pinOne pins one object for client, restoring it first when it is
// stored and not in memory.
func (s *Spiller) pinOne(ctx context.Context, id ids.ObjectID, client ids.ID) (Entry, error) {
	var rs *restore // the restore this reader waited for
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		e := s.store.GetEntries([]ids.ObjectID{id}, client)[0]
		if rs != nil {
			s.leaveLocked(id, rs)
			rs = nil
		}
		if e.Found {
			return e, nil
		}
		so := s.objs[id]
		if so == nil || so.inMemory {
			// Not spilled, or its owner freed it: not found.
			return e, nil
		}
		rs = s.restores[id]
		if rs == nil {
			rs = s.startRestoreLocked(id, so)
		}
		rs.waiters++
		s.mu.Unlock()
		select {
		case <-rs.done:
		case <-ctx.Done():
		}
		s.mu.Lock()
		if !isDone(rs.done) {
			s.leaveLocked(id, rs)
			return Entry{}, ctx.Err()
		}
		if rs.err != nil {
			s.leaveLocked(id, rs)
			return Entry{}, rs.err
		}
		// Restored and pinned by its creator until every waiter took its
		// own pin: loop to take ours.
	}
}

// isDone reports whether ch is closed.
func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// startRestoreLocked starts restoring the stored object id. The restored
// object stays pinned by the restore's creator until every reader waiting
// for it pinned it too (leaveLocked). Requires s.mu.
func (s *Spiller) startRestoreLocked(id ids.ObjectID, so *spilledObject) *restore {
	rs := &restore{done: make(chan struct{}), creator: ids.New()}
	s.restores[id] = rs
	file, off, size, meta := so.file, so.offset, so.size, so.meta
	go func() {
		created, err := s.doRestore(id, rs.creator, file, off, size, meta)
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.restores, id)
		rs.err = err
		if err == nil {
			if cur := s.objs[id]; cur != nil {
				cur.inMemory = true
			} else {
				// Its owner freed it while it was restored.
				s.store.Free([]ids.ObjectID{id})
			}
			rs.held = created
			if rs.held && rs.waiters == 0 {
				s.store.Release([]ids.ObjectID{id}, rs.creator)
				rs.held = false
			}
		}
		close(rs.done)
	}()
	return rs
}

// leaveLocked records that a reader waiting for restore rs is done with
// it; the last one drops the restore's own pin. Requires s.mu.
func (s *Spiller) leaveLocked(id ids.ObjectID, rs *restore) {
	rs.waiters--
	if rs.waiters == 0 && rs.held {
		s.store.Release([]ids.ObjectID{id}, rs.creator)
		rs.held = false
	}
}

// doRestore reads a stored object into a new store object, sealed and
// pinned by creator (the caller releases it). An object that is in the
// store already (sealed) is not read again.
func (s *Spiller) doRestore(id ids.ObjectID, creator ids.ID, f *spillFile, off, size int64, meta []byte) (created bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	arenaOff, err := s.objects.CreateMakingRoom(ctx, id, size, meta, creator)
	if err != nil {
		if s.store.Contains(id) {
			return false, nil
		}
		return false, fmt.Errorf("restoring object %s: %w", id, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = s.store.Abort(id)
		}
	}()
	st, err := s.cfg.Storage()
	if err != nil {
		return false, fmt.Errorf("restoring object %s: %w", id, err)
	}
	if err := s.readIntoArena(ctx, st, f.key, off, arenaOff, size); err != nil {
		return false, fmt.Errorf("restoring object %s from %s: %w", id, f.url, err)
	}
	if err := s.store.Seal(id, creator, false); err != nil {
		return false, err
	}
	ok = true
	s.mu.Lock()
	s.stats.RestoredBytes += size
	s.stats.RestoredObjects++
	took := time.Since(start)
	s.stats.RestoreSeconds += took.Seconds()
	s.mu.Unlock()
	if s.cfg.Observer != nil {
		s.cfg.Observer.ObserveRestore(size, took)
	}
	return true, nil
}

// Parallel restore reads: an object of at least 2×restoreRange bytes is
// read by up to restoreStreams ranged reads at once (as S3 transfer
// managers do: one stream rarely fills the link).
const (
	restoreRange   = 8 << 20
	restoreStreams = 4
)

// splitRanges calls part for [0, size) in up to restoreStreams ranges at
// once when size is large (one call otherwise), and returns the first
// error.
func splitRanges(ctx context.Context, size int64, part func(ctx context.Context, lo, n int64) error) error {
	n := min(restoreStreams, int(size/restoreRange))
	if n <= 1 {
		return part(ctx, 0, size)
	}
	g, ctx := errgroup.WithContext(ctx)
	per := (size + int64(n) - 1) / int64(n)
	for lo := int64(0); lo < size; lo += per {
		l := min(per, size-lo)
		g.Go(func() error { return part(ctx, lo, l) })
	}
	return g.Wait()
}

// readRanges reads len(dst) bytes of the stored file key from offset off
// into dst, by parallel ranged reads when dst is large.
func readRanges(ctx context.Context, st storage.Storage, key string, off int64, dst []byte) error {
	return splitRanges(ctx, int64(len(dst)), func(ctx context.Context, lo, n int64) error {
		return readRange(ctx, st, key, off+lo, dst[lo:lo+n])
	})
}

// readIntoArena reads size bytes of the stored file key from offset off
// into the arena at arenaOff, in parallel ranges when large: written
// straight into the arena by the plugin (ReadInto) when the storage is a
// plugin that can, else streamed back and copied.
func (s *Spiller) readIntoArena(ctx context.Context, st storage.Storage, key string, off, arenaOff, size int64) error {
	ri, direct := st.(storage.ReaderInto)
	direct = direct && s.cfg.ArenaPath != "" && !s.noReadInto.Load()
	if !direct {
		return readRanges(ctx, st, key, off, s.store.Data(arenaOff, size))
	}
	err := splitRanges(ctx, size, func(ctx context.Context, lo, n int64) error {
		_, err := ri.ReadInto(ctx, &storage.ReadIntoRequest{Key: key, Offset: off + lo, Length: n, TargetPath: s.cfg.ArenaPath, TargetOffset: arenaOff + lo})
		return err
	})
	if errors.Is(err, storage.ErrNotSupported) {
		s.noReadInto.Store(true) // a plugin built before ReadInto: stream
		return readRanges(ctx, st, key, off, s.store.Data(arenaOff, size))
	}
	return err
}

// readRange reads len(dst) bytes of the stored file key from offset off.
func readRange(ctx context.Context, st storage.Storage, key string, off int64, dst []byte) error {
	rep, err := st.Read(ctx, &storage.ReadRequest{Key: key, Offset: off, Length: int64(len(dst))})
	if err != nil {
		return err
	}
	defer rep.Body.Close()
	_, err = io.ReadFull(rep.Body, dst)
	return err
}

// Forget drops the stored copies of freed objects and deletes files none
// of whose objects is alive.
func (s *Spiller) Forget(objs []ids.ObjectID) {
	if !s.Enabled() {
		return
	}
	var dead, records []string
	var forgot []ids.ObjectID
	s.mu.Lock()
	for _, id := range objs {
		so := s.objs[id]
		if so == nil {
			continue
		}
		delete(s.objs, id)
		forgot = append(forgot, id)
		records = append(records, so.records()...)
		so.file.live--
		if so.file.live == 0 && !so.file.foreign {
			delete(s.files, so.file.key)
			dead = append(dead, so.file.key)
		}
	}
	s.mu.Unlock()
	// A restore may have brought a copy back after the owner's free
	// reached the store: it goes too.
	s.store.Free(forgot)
	if len(dead) > 0 {
		go s.deleteFiles(dead)
	}
	if len(records) > 0 {
		go s.unpublish(records)
	}
}

// deleteFiles deletes stored files, logging failures.
func (s *Spiller) deleteFiles(keys []string) {
	st, err := s.cfg.Storage()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = st.Delete(ctx, &storage.DeleteRequest{Keys: keys})
	}
	if err != nil {
		s.log.Warn("deleting spilled files failed", "files", len(keys), "error", err)
	}
}

// DeleteAll deletes every file this node stored (shutdown) and the GCS
// records of its objects. A node that drains (SetDraining) keeps the
// files holding objects recorded under it, and those records: other nodes
// restore the objects from them once this node is gone (they stay until
// the cluster stops, as a dead node's do).
func (s *Spiller) DeleteAll(ctx context.Context) {
	if !s.Enabled() || s.cfg.KeepFiles {
		return
	}
	// After the round in flight (its context ends with the node's).
	s.round.Lock()
	defer s.round.Unlock()
	s.mu.Lock()
	var keys, records []string
	keep := map[string]bool{} // file keys
	if s.draining.Load() {
		for id, so := range s.objs {
			if so.recordedHere(s.nodeID, id) {
				keep[so.file.key] = true
			}
		}
	}
	for k := range s.files {
		if !keep[k] {
			keys = append(keys, k)
		}
	}
	for _, so := range s.objs {
		if !keep[so.file.key] {
			records = append(records, so.records()...)
		}
	}
	s.files = map[string]*spillFile{}
	s.objs = map[ids.ObjectID]*spilledObject{}
	s.mu.Unlock()
	if len(keep) > 0 {
		s.log.Info("the node drained: keeping its spilled files and their records in the GCS, from which other nodes restore its objects", "files", len(keep))
	}
	s.unpublish(records)
	if len(keys) == 0 {
		return
	}
	st, err := s.cfg.Storage()
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err = st.Delete(ctx, &storage.DeleteRequest{Keys: keys})
	}
	if err != nil {
		s.log.Warn("deleting spilled files at shutdown failed", "files", len(keys), "error", err)
	}
}

// publish records in the GCS where the objects of a stored file are, when
// the storage is shared, and returns the record keys (by batch index; ""
// when not recorded). Failures are logged: the object is then only
// reachable through this node, as with node-local storage.
func (s *Spiller) publish(ctx context.Context, key, url string, batch []candidate, offsets []int64) []string {
	out := make([]string, len(batch))
	if s.cfg.Shared == "" || s.gcs == nil {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, gcsTimeout)
	defer cancel()
	// One put per object, several at once: a fused file may hold many.
	var g errgroup.Group
	g.SetLimit(publishConcurrency)
	for i, c := range batch {
		g.Go(func() error {
			v, err := json.Marshal(spillRecord{Storage: s.cfg.Shared, Key: key, URL: url, Offset: offsets[i], Size: c.size, Meta: c.meta})
			if err == nil {
				rk := recordKey(s.nodeID, c.id)
				if _, err = s.gcs.KVPut(ctx, &gorayv1.KVPutRequest{Ns: spillRecordNS, Key: rk, Value: v, Overwrite: true}); err == nil {
					out[i] = rk
					return nil
				}
			}
			s.log.Warn("recording a spilled object in the GCS failed; it is lost if this node dies", "object_id", c.id, "error", err)
			return nil
		})
	}
	_ = g.Wait()
	return out
}

// publishConcurrency bounds the spill record puts in flight.
const publishConcurrency = 16

// unpublish deletes spill records.
func (s *Spiller) unpublish(records []string) {
	if len(records) == 0 || s.gcs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), gcsTimeout)
	defer cancel()
	for _, k := range records {
		if _, err := s.gcs.KVDel(ctx, &gorayv1.KVDelRequest{Ns: spillRecordNS, Key: k}); err != nil {
			s.log.Debug("deleting a spill record failed", "key", k, "error", err)
			return
		}
	}
}

// RestoreFromRecord restores an object whose node died from the copy that
// node spilled to shared storage, when it recorded one and this node
// spills to the same storage plugin. The restored object is a primary copy
// of this node owned by owner; it keeps the dead node's file as its stored
// copy (dropped again without writing), and the file is never deleted
// here. ErrNoSpilledCopy when there is no record.
func (s *Spiller) RestoreFromRecord(oid ids.ObjectID, node ids.ID, owner *gorayv1.Address) error {
	if !s.Enabled() || s.gcs == nil {
		return ErrNoSpilledCopy
	}
	ctx, cancel := context.WithTimeout(context.Background(), gcsTimeout)
	rk := recordKey(node, oid)
	rep, err := s.gcs.KVGet(ctx, &gorayv1.KVGetRequest{Ns: spillRecordNS, Key: rk})
	cancel()
	if err != nil {
		return fmt.Errorf("looking up a spilled copy: %w", err)
	}
	if !rep.GetFound() {
		return ErrNoSpilledCopy
	}
	var rec spillRecord
	if err := json.Unmarshal(rep.GetValue(), &rec); err != nil {
		return fmt.Errorf("spill record %s: %w", rk, err)
	}
	if rec.Storage != s.cfg.Shared {
		return fmt.Errorf("its spilled copy %s is in storage plugin %q, which this node does not spill to", rec.URL, rec.Storage)
	}
	f := &spillFile{key: rec.Key, url: rec.URL, foreign: true}
	creator := ids.New()
	created, err := s.doRestore(oid, creator, f, rec.Offset, rec.Size, rec.Meta)
	if err != nil {
		return err
	}
	s.objects.Track(oid, owner)
	s.mu.Lock()
	if _, ok := s.objs[oid]; !ok {
		f.live++
		s.objs[oid] = &spilledObject{file: f, offset: rec.Offset, size: rec.Size, meta: rec.Meta, inMemory: true, record: rk}
	}
	s.mu.Unlock()
	if created {
		s.store.Release([]ids.ObjectID{oid}, creator)
	}
	s.log.Info("object of a dead node restored from its spilled copy", "object_id", oid, "node", node, "url", rec.URL)
	return nil
}

// Stats reports the spill counters.
func (s *Spiller) Stats() *gorayv1.SpillStats {
	if !s.Enabled() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &gorayv1.SpillStats{
		Location: s.cfg.Location, SpilledBytes: s.stats.SpilledBytes, SpilledObjects: s.stats.SpilledObjects,
		RestoredBytes: s.stats.RestoredBytes, RestoredObjects: s.stats.RestoredObjects,
		SpillSeconds: s.stats.SpillSeconds, RestoreSeconds: s.stats.RestoreSeconds, Files: int64(len(s.files)),
	}
	for _, so := range s.objs {
		if !so.inMemory {
			st.StoredObjects++
			st.StoredBytes += so.size
		}
	}
	if s.failing != nil {
		st.Failing = s.failing.Error()
	}
	return st
}

// List lists the spilled objects.
func (s *Spiller) List() []*gorayv1.SpilledObject {
	if !s.Enabled() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*gorayv1.SpilledObject, 0, len(s.objs))
	for id, so := range s.objs {
		out = append(out, &gorayv1.SpilledObject{ObjectId: id.Bytes(), Url: so.file.url, Offset: so.offset, Size: so.size, InMemory: so.inMemory})
	}
	return out
}

// ErrDisabled says spilling is off on the node (no storage configured).
var ErrDisabled = errors.New("spilling is off")

// Shared reports whether what this node spills outlives it: spilling is
// on, to a storage plugin every node can read (Config.Shared), and each
// spilled object is recorded in the GCS, from where another node restores
// it after this node is gone. The in-process local-disk default is not
// shared.
func (s *Spiller) Shared() bool { return s.Enabled() && s.cfg.Shared != "" && s.gcs != nil }

// Location names the storage for messages.
func (s *Spiller) Location() string {
	if !s.Enabled() {
		return "no spill storage"
	}
	return s.cfg.Location
}

// SetDraining marks the node as draining (or not any more): a draining
// node's DeleteAll keeps the files and GCS records other nodes need to
// restore its objects.
func (s *Spiller) SetDraining(on bool) {
	if s != nil {
		s.draining.Store(on)
	}
}

// Draining reports whether the node is marked as draining (SetDraining).
func (s *Spiller) Draining() bool { return s != nil && s.draining.Load() }

// SpillAll moves every sealed primary copy no reader pins from memory to
// storage, fused into files as Run does (each recorded in the GCS with
// shared storage), and records under this node the stored objects that
// have no such record yet (one whose record failed, or a copy restored
// from a dead node's record): what a draining node does so that its
// objects outlive it. Restored copies whose bytes are stored stay in
// memory. It returns how many objects it wrote and the first error: ctx's,
// the storage's, or ErrDisabled.
func (s *Spiller) SpillAll(ctx context.Context) (int, error) {
	if !s.Enabled() {
		return 0, ErrDisabled
	}
	s.round.Lock()
	defer s.round.Unlock()
	if err := s.recordStored(ctx); err != nil {
		return 0, err
	}
	moved := 0
	for {
		if err := ctx.Err(); err != nil {
			return moved, err
		}
		var batch []candidate
		var size int64
		for _, c := range s.candidates() {
			if c.stored {
				continue
			}
			batch = append(batch, c)
			size += c.size
			if len(batch) == s.cfg.MaxObjectsPerFile || size >= s.cfg.MinFileSize {
				break
			}
		}
		if len(batch) == 0 {
			return moved, nil
		}
		freed, n, err := s.writeFile(ctx, batch)
		s.signal(freed, err)
		if err != nil {
			return moved, err
		}
		moved += n
	}
}

// recordStored records in the GCS, under this node, every stored object
// that has no such record (with shared storage; a no-op otherwise). It
// returns the first error of ctx or the GCS.
func (s *Spiller) recordStored(ctx context.Context) error {
	if !s.Shared() {
		return nil
	}
	type todo struct {
		id ids.ObjectID
		so *spilledObject
		v  []byte
	}
	var list []todo
	s.mu.Lock()
	for id, so := range s.objs {
		if so.recordedHere(s.nodeID, id) {
			continue
		}
		v, err := json.Marshal(spillRecord{Storage: s.cfg.Shared, Key: so.file.key, URL: so.file.url, Offset: so.offset, Size: so.size, Meta: so.meta})
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("spill record of object %s: %w", id, err)
		}
		list = append(list, todo{id, so, v})
	}
	s.mu.Unlock()
	for _, t := range list {
		rk := recordKey(s.nodeID, t.id)
		cctx, cancel := context.WithTimeout(ctx, gcsTimeout)
		_, err := s.gcs.KVPut(cctx, &gorayv1.KVPutRequest{Ns: spillRecordNS, Key: rk, Value: t.v, Overwrite: true})
		cancel()
		if err != nil {
			return fmt.Errorf("recording spilled object %s in the GCS: %w", t.id, err)
		}
		s.mu.Lock()
		live := s.objs[t.id] == t.so
		if live {
			if t.so.record == "" {
				t.so.record = rk
			} else {
				t.so.handover = rk
			}
		}
		s.mu.Unlock()
		if !live {
			s.unpublish([]string{rk}) // freed meanwhile
		}
	}
	return nil
}

// Holdings says where a node's primary copies are, for its drain.
type Holdings struct {
	// Left and LeftBytes count the primary copies whose only copy is on
	// this node: in memory with no stored copy recorded in the GCS under
	// this node, or stored without such a record (node-local storage, or
	// a record that failed).
	Left      int
	LeftBytes int64
	// Busy counts those of Left that cannot be spilled now: pinned by a
	// reader, or not sealed yet.
	Busy int
	// Moved counts the primary copies stored and recorded in the GCS under
	// this node: other nodes restore them once it is gone.
	Moved int
}

// Holdings reports where the node's primary copies are, given those in
// memory (the store's entries that are primary copies, sealed or not).
func (s *Spiller) Holdings(inMemory []Entry) Holdings {
	var h Holdings
	if s == nil {
		for _, e := range inMemory {
			h.Left++
			h.LeftBytes += e.DataSize
			if e.Pins > 0 || !e.Sealed {
				h.Busy++
			}
		}
		return h
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[ids.ObjectID]bool, len(inMemory))
	for _, e := range inMemory {
		seen[e.ID] = true
		if so := s.objs[e.ID]; so != nil && so.recordedHere(s.nodeID, e.ID) {
			h.Moved++
			continue
		}
		h.Left++
		h.LeftBytes += e.DataSize
		if e.Pins > 0 || !e.Sealed {
			h.Busy++
		}
	}
	for id, so := range s.objs {
		switch {
		case seen[id]:
		case so.recordedHere(s.nodeID, id):
			h.Moved++
		default:
			h.Left++
			h.LeftBytes += so.size
		}
	}
	return h
}
