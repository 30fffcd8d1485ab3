// Package recvseg keeps, per process, a ledger of the shared-memory
// segments that tensor receives allocated for it (copies that arrived from
// another node or process, which the process owns until
// ray.ReleaseTensors). The ledger is a directory under the node's session
// (one empty file per segment), so that whoever outlives the process can
// unlink what it never released: the process itself when it closes, its
// raylet when it dies (even by kill -9), the node when it stops.
package recvseg

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// Root is the directory of every process's ledger under a session.
func Root(sessionDir string) string { return filepath.Join(sessionDir, "tensors") }

// Dir is the ledger of process id under a session.
func Dir(sessionDir string, id ids.ID) string { return filepath.Join(Root(sessionDir), id.String()) }

// Add records segments in the ledger dir (created if needed). Names that
// are not valid segment names are refused.
func Add(dir string, segs ...string) error {
	if len(segs) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, s := range segs {
		if err := shmem.ValidName(s); err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(dir, s), os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_ = f.Close()
	}
	return nil
}

// Remove forgets segments (the process released them or handed them to a
// transport).
func Remove(dir string, segs ...string) {
	for _, s := range segs {
		if shmem.ValidName(s) == nil {
			_ = os.Remove(filepath.Join(dir, s))
		}
	}
}

// Sweep unlinks every segment in the ledger dir and removes it; it returns
// the segments it unlinked (segments already gone are not errors). A
// missing ledger is empty.
func Sweep(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var unlinked []string
	var first error
	for _, e := range entries {
		name := e.Name()
		if shmem.ValidName(name) != nil {
			continue
		}
		switch err := shmem.Unlink(name); {
		case err == nil:
			unlinked = append(unlinked, name)
		case errors.Is(err, shmem.ErrNotFound):
		default:
			if first == nil {
				first = err
			}
			continue // keep it listed for the next sweep
		}
		_ = os.Remove(filepath.Join(dir, name))
	}
	if first != nil {
		return unlinked, first
	}
	return unlinked, os.RemoveAll(dir)
}

// SweepAll sweeps every ledger of a session (the node stops).
func SweepAll(sessionDir string) ([]string, error) {
	root := Root(sessionDir)
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var all []string
	var first error
	for _, e := range entries {
		got, err := Sweep(filepath.Join(root, e.Name()))
		all = append(all, got...)
		if err != nil && first == nil {
			first = err
		}
	}
	return all, first
}
