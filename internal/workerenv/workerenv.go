// Package workerenv names the environment variables the raylet sets for
// every worker process it starts. The core worker reads them to find its
// raylet and learn its identity; the CLI reads SessionDir to find a node's
// processes. They are the contract between the raylet and a worker binary,
// kept here so that neither imports the other.
package workerenv

import (
	"fmt"
	"strings"

	"github.com/goray-dev/goray/sdk/transport/shmem"
)

const (
	// Worker is "1" in a worker process (the user binary re-executed in
	// worker mode).
	Worker = "GORAY_WORKER"
	// RayletSocket is the unix socket path of the raylet that started the
	// worker.
	RayletSocket = "GORAY_RAYLET_SOCKET"
	// WorkerID is the worker's id (hex); the worker must present it in its
	// WorkerSession registration.
	WorkerID = "GORAY_WORKER_ID"
	// NodeID is the node's id (hex).
	NodeID = "GORAY_NODE_ID"
	// JobID is the id (hex) of the job the worker serves.
	JobID = "GORAY_JOB_ID"
	// SessionDir is the node's session directory; workers put their sockets
	// in its "sockets" subdirectory.
	SessionDir = "GORAY_SESSION_DIR"
	// LogLevel is the hclog level name the worker should log at.
	LogLevel = "GORAY_LOG_LEVEL"
	// NodeIP is the IP address the worker listens on for other nodes.
	NodeIP = "GORAY_NODE_IP"
	// ShmPool is the directory of the node's pool of tensor segments
	// (shmem.EnvPool), set when the node has one.
	ShmPool = shmem.EnvPool
	// LogMaxFileSize and LogMaxFiles are the node's logs block (bytes, a
	// count), which bound the worker's own log file, worker-<id>.log.
	LogMaxFileSize = "GORAY_LOG_MAX_FILE_SIZE"
	LogMaxFiles    = "GORAY_LOG_MAX_FILES"
	// LeaseEnv names (comma-separated) the variables the worker was
	// started with for its task or actor (LeaseRequest.env_vars), set only
	// then: what the worker submits inherits them, as in Ray.
	LeaseEnv = "GORAY_LEASE_ENV"
	// LeaseWorkingDir is SHA256@NODE, the working dir the worker was
	// started in for its task or actor (LeaseRequest.working_dir_sha256 and
	// working_dir_node), set only then: what the worker submits inherits
	// it.
	LeaseWorkingDir = "GORAY_LEASE_WORKING_DIR"
)

// Names lists every variable above; the raylet replaces inherited values
// of these, never duplicates them.
var Names = []string{Worker, RayletSocket, WorkerID, NodeID, JobID, SessionDir, LogLevel, NodeIP, ShmPool, LogMaxFileSize, LogMaxFiles, LeaseEnv, LeaseWorkingDir}

// MaxVarsBytes bounds the variables a job, task or actor sets for its
// workers (sdk/ray's EnvVars), names and values together.
const MaxVarsBytes = 64 << 10

// CheckVars checks variables a task or actor sets for its workers
// (LeaseRequest.env_vars): NAME=value each, sorted by name, each name
// once, not empty and without "=" or NUL, no GORAY_ name (those are the
// runtime's own), no NUL in a value, at most MaxVarsBytes together.
func CheckVars(vars []string) error {
	total, prev := 0, ""
	for i, kv := range vars {
		name, val, ok := strings.Cut(kv, "=")
		switch {
		case !ok || name == "" || strings.ContainsRune(name, 0):
			return fmt.Errorf("env_vars[%d]: %q is not NAME=value", i, clip(kv))
		case strings.HasPrefix(name, "GORAY_"):
			return fmt.Errorf("env_vars[%d]: %s: GORAY_ variables are the runtime's own", i, clip(name))
		case strings.ContainsRune(val, 0):
			return fmt.Errorf("env_vars[%d]: the value of %s holds a NUL byte", i, clip(name))
		case i > 0 && name <= prev:
			return fmt.Errorf("env_vars[%d]: %s is out of order or repeated (want names sorted, each once)", i, clip(name))
		}
		prev = name
		total += len(kv)
		if total > MaxVarsBytes {
			return fmt.Errorf("env_vars: more than %d bytes (at %s)", MaxVarsBytes, clip(name))
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
