package node

import (
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// startTensorPool makes the node's pool of freed tensor segments (the
// tensor_pool block) before the plugins start, so that the node's
// transports, workers and, in this process, the embedded driver share it.
// It first removes the pools of nodes that died without removing theirs.
func (n *Node) startTensorPool() error {
	if removed, err := shmem.CleanupPools(); err != nil {
		n.log.Warn("removing the tensor segment pools of dead nodes", "error", err)
	} else if len(removed) > 0 {
		n.log.Info("removed the tensor segment pools of dead nodes", "pools", removed)
	}
	if n.cfg.TensorPool.MaxMemory <= 0 {
		return nil
	}
	p, err := shmem.NewPool()
	if err != nil {
		return err
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
	}
	n.tensorPool = nil
}
