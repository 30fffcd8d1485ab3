//go:build !unix

package connlimit

// fdLimit is the process's soft descriptor limit (0: unknown).
func fdLimit() int { return 0 }
