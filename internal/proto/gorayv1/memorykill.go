package gorayv1

import (
	"encoding/hex"
	"fmt"

	"github.com/dustin/go-humanize"
)

// Describe says in words why the memory monitor killed a worker: the
// node, its memory use against the threshold, the worker and why it was
// chosen. The raylet gives it as the worker's death reason; the owner of
// a killed task puts it in its OutOfMemoryError.
func (k *MemoryKill) Describe() string {
	node := shortHex(k.GetNodeId())
	if k.GetNodeName() != "" {
		node = fmt.Sprintf("%s (%s)", node, k.GetNodeName())
	}
	frac := 0.0
	if k.GetTotalBytes() > 0 {
		frac = float64(k.GetUsedBytes()) / float64(k.GetTotalBytes())
	}
	source := ""
	if k.GetSource() != "" {
		source = ", read from " + k.GetSource()
	}
	return fmt.Sprintf("killed by the memory monitor: memory on node %s at %s was %s of %s (%.3f), above the usage threshold %.3f%s; "+
		"worker %s (pid %d) was killed because %s",
		node, k.GetNodeIp(), humanize.IBytes(uint64(max(k.GetUsedBytes(), 0))), humanize.IBytes(uint64(max(k.GetTotalBytes(), 0))), frac,
		k.GetThreshold(), source, shortHex(k.GetWorkerId()), k.GetPid(), k.GetWhy())
}

// shortHex is the first 8 hex digits of an id, as ids.ID.Short prints it.
func shortHex(b []byte) string {
	s := hex.EncodeToString(b)
	if len(s) > 8 {
		return s[:8]
	}
	return s
}
