package raylet

import "github.com/goray-dev/goray/internal/workerenv"

// Environment variables the raylet sets for every worker process it starts
// (see internal/workerenv, where they are defined).
const (
	// EnvWorker is "1" in a worker process.
	EnvWorker = workerenv.Worker
	// EnvRayletSocket is the unix socket path of the worker's raylet.
	EnvRayletSocket = workerenv.RayletSocket
	// EnvWorkerID is the worker's id (hex).
	EnvWorkerID = workerenv.WorkerID
	// EnvNodeID is the node's id (hex).
	EnvNodeID = workerenv.NodeID
	// EnvJobID is the id (hex) of the job the worker serves.
	EnvJobID = workerenv.JobID
	// EnvSessionDir is the node's session directory.
	EnvSessionDir = workerenv.SessionDir
	// EnvLogLevel is the hclog level name the worker should log at.
	EnvLogLevel = workerenv.LogLevel
	// EnvNodeIP is the IP address the worker listens on for other nodes.
	EnvNodeIP = workerenv.NodeIP
	// EnvShmPool is the directory of the node's tensor segment pool, set
	// when the node has one.
	EnvShmPool = workerenv.ShmPool
)

// workerEnvNames lists every variable above; inherited values of these are
// replaced, never duplicated.
var workerEnvNames = workerenv.Names
