package node

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// PoolRecord is the file in a session directory that names the node's
// tensor segment pool (its directory in /dev/shm, one line), written as
// soon as the pool is made and removed with it: what ties a pool to its
// temp dir, so that `goray stop` and a node starting remove the pools of
// their own temp dir's dead nodes and no one else's.
const PoolRecord = "tensor_pool"

// maxPoolRecord bounds what RecordedPool reads of a record.
const maxPoolRecord = 4096

// RecordedPool returns the pool directory a session's PoolRecord names
// ("" when it has none).
func RecordedPool(sessionDir string) (string, error) {
	f, err := os.Open(filepath.Join(sessionDir, PoolRecord))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 256), maxPoolRecord)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return "", fmt.Errorf("reading %s: %w", filepath.Join(sessionDir, PoolRecord), err)
		}
		return "", nil
	}
	return strings.TrimSpace(sc.Text()), nil
}

// RemoveDeadPools removes the tensor segment pools the given sessions
// recorded whose node is dead (shmem.RemoveDeadPools), and the records of
// the pools that are gone, and returns the pools it removed. Pools no
// session of these names, another temp dir's or another user's, are
// never touched.
func RemoveDeadPools(sessionDirs []string) ([]string, error) {
	var removed []string
	var errs []error
	for _, dir := range sessionDirs {
		pool, err := RecordedPool(dir)
		if errors.Is(err, os.ErrPermission) {
			continue // another user's
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if pool == "" {
			continue
		}
		r, err := shmem.RemoveDeadPools([]string{pool})
		if err != nil {
			errs = append(errs, fmt.Errorf("the tensor segment pool %s named in %s: %w", pool, filepath.Join(dir, PoolRecord), err))
			continue
		}
		removed = append(removed, r...)
		if _, err := os.Lstat(pool); errors.Is(err, os.ErrNotExist) {
			if err := os.Remove(filepath.Join(dir, PoolRecord)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// removeDeadPoolsOf removes the pools of the dead nodes of this node's
// temp dir (the other sessions under it). An embedded node's session is
// a goray-* directory in the process's temporary directory
// (os.MkdirTemp), so an embedded node removes those of the embedded nodes
// killed before there: nothing else would.
func (n *Node) removeDeadPoolsOf() {
	root, pattern := filepath.Dir(n.info.SessionDir), "session_*"
	if n.opts.Embedded {
		pattern = "goray-*"
	}
	sessions, err := filepath.Glob(filepath.Join(root, pattern))
	if err != nil {
		return
	}
	sessions = slices.DeleteFunc(sessions, func(s string) bool { return s == n.info.SessionDir })
	removed, err := RemoveDeadPools(sessions)
	if err != nil {
		n.log.Warn("removing the tensor segment pools of dead nodes", "error", err)
	}
	if len(removed) > 0 {
		n.log.Info("removed the tensor segment pools of dead nodes", "pools", removed)
	}
}

// startTensorPool makes the node's pool of freed tensor segments (the
// tensor_pool block) before the plugins start, so that the node's
// transports, workers and, in this process, the embedded driver share it,
// and records it in the session (PoolRecord). It first removes the pools
// of its temp dir's nodes that died without removing theirs.
func (n *Node) startTensorPool() error {
	n.removeDeadPoolsOf()
	if n.cfg.TensorPool.MaxMemory <= 0 {
		return nil
	}
	p, err := shmem.NewPool()
	if err != nil {
		return err
	}
	record := filepath.Join(n.info.SessionDir, PoolRecord)
	if err := os.WriteFile(record, []byte(p.Dir()+"\n"), 0o600); err != nil {
		_ = p.Remove()
		return fmt.Errorf("recording the pool in %s: %w", record, err)
	}
	n.tensorPool = p
	if shmem.DefaultPool() == nil {
		shmem.SetDefaultPool(p)
		n.ownsDefaultPool = true
	}
	return nil
}

// tensorPoolEnv is the plugins' environment naming the pool.
func (n *Node) tensorPoolEnv() []string {
	if n.tensorPool == nil {
		return nil
	}
	return []string{shmem.EnvPool + "=" + n.tensorPool.Dir()}
}

// stopTensorPool removes the pool: its segments are unlinked (processes
// still mapping one keep it until they unmap it).
func (n *Node) stopTensorPool() {
	if n.tensorPool == nil {
		return
	}
	if n.ownsDefaultPool {
		if cur := shmem.DefaultPool(); cur == n.tensorPool {
			shmem.SetDefaultPool(nil)
		}
		n.ownsDefaultPool = false
	}
	if err := n.tensorPool.Remove(); err != nil {
		n.log.Warn("removing the tensor segment pool", "error", err)
	} else {
		_ = os.Remove(filepath.Join(n.info.SessionDir, PoolRecord))
	}
	n.tensorPool = nil
}
