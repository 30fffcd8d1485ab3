package shmem

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Scrubber zeroes the segments of a pool in the background, so that
// transport.NewTensor, which must hand out zeroed memory, finds a zeroed
// segment and skips its own fill: filling 64 MiB costs about as much as
// reading them, and a node's raylet does it on a core the tensor's
// producer is not using. A node runs one Scrubber on its pool, woken when
// a segment enters it.
//
// A segment is zeroed only while the Scrubber holds its exclusive lock and
// the segment still has its name in the pool: no process reads it (every
// reader holds a shared lock) and Get cannot take it meanwhile (it needs
// the exclusive lock too). Zeroed entries are renamed with the "-z"
// suffix; Get prefers them and says so.
//
// The Scrubber keeps its mappings, by file, up to a bound: pooled
// segments come back again and again, and mapping 64 MiB anew costs more
// page faults than the fill. A mapping whose segment was unlinked is
// dropped at the next Scrub.
type Scrubber struct {
	pool    *Pool
	maxMaps int

	mu   sync.Mutex
	maps map[uint64]*scrubMap // by inode
	tick int64                // Scrub calls, for least recently used
}

type scrubMap struct {
	seg  *Segment
	f    *os.File // open while mapped: fstat says when it was unlinked
	used int64
}

// NewScrubber returns a Scrubber of p keeping at most maxMaps mappings
// (at least 1).
func NewScrubber(p *Pool, maxMaps int) *Scrubber {
	return &Scrubber{pool: p, maxMaps: max(maxMaps, 1), maps: map[uint64]*scrubMap{}}
}

// Scrub zeroes the pool's segments not zeroed yet, most recently put first,
// until it has zeroed at least maxBytes (negative: no bound) or ctx ends,
// and returns what it zeroed. A segment a process still reads, or that Get
// is taking, is left for a later Scrub.
func (s *Scrubber) Scrub(ctx context.Context, maxBytes int64) (segments int, bytes int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.sweepLocked()
	s.tick++
	es, err := s.pool.entries()
	if err != nil {
		return 0, 0, err
	}
	var errs []error
	for _, e := range es {
		if e.zeroed {
			continue
		}
		if ctx.Err() != nil || maxBytes >= 0 && bytes >= maxBytes {
			break
		}
		ok, err := s.scrubLocked(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			segments++
			bytes += e.size
		}
	}
	return segments, bytes, errors.Join(errs...)
}

// scrubLocked zeroes entry e and marks it zeroed, if nobody holds it.
func (s *Scrubber) scrubLocked(e poolEntry) (bool, error) {
	path := filepath.Join(s.pool.dir, e.name)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false, nil // taken or trimmed meanwhile
	}
	keep := false
	defer func() {
		if !keep {
			_ = f.Close()
		}
	}()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, nil // a reader still maps it, or Get is taking it
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN) //nolint:errcheck // closing unlocks too
	// Get may have taken it between the open and the lock (it renames it
	// under the lock): zero it only if it is still this entry.
	var fst, pst unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &fst); err != nil {
		return false, opErr("scrub", e.name, err)
	}
	if err := unix.Stat(path, &pst); err != nil || pst.Ino != fst.Ino || fst.Size != e.size {
		return false, nil
	}
	m := s.maps[fst.Ino]
	if m == nil || m.seg.size != fst.Size {
		if m != nil {
			s.closeLocked(fst.Ino, m)
		}
		seg, err := mapFile(f, e.name, fst.Size)
		if err != nil {
			return false, err
		}
		m = &scrubMap{seg: seg, f: f}
		s.maps[fst.Ino] = m
		keep = true
	}
	m.used = s.tick
	clear(m.seg.data)
	if err := os.Rename(path, path+ZeroedSuffix); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil // trimmed while it was zeroed
		}
		return false, opErr("scrub", e.name, err)
	}
	return true, nil
}

// sweepLocked drops the mappings of unlinked segments, then the least
// recently used beyond the bound.
func (s *Scrubber) sweepLocked() {
	for ino, m := range s.maps {
		var st unix.Stat_t
		if err := unix.Fstat(int(m.f.Fd()), &st); err != nil || st.Nlink == 0 {
			s.closeLocked(ino, m)
		}
	}
	for len(s.maps) > s.maxMaps {
		var oldest uint64
		var om *scrubMap
		for ino, m := range s.maps {
			if om == nil || m.used < om.used {
				oldest, om = ino, m
			}
		}
		s.closeLocked(oldest, om)
	}
}

func (s *Scrubber) closeLocked(ino uint64, m *scrubMap) {
	delete(s.maps, ino)
	_ = m.seg.Close()
	_ = m.f.Close()
}

// Close unmaps everything the Scrubber mapped. It may be used again after.
func (s *Scrubber) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ino, m := range s.maps {
		s.closeLocked(ino, m)
	}
	return nil
}
