package raylet

// Environment variables the raylet sets for every worker process it starts.
// The core worker reads them to find its raylet and learn its identity.
const (
	// EnvWorker is "1" in a worker process (the user binary re-executed in
	// worker mode).
	EnvWorker = "GORAY_WORKER"
	// EnvRayletSocket is the unix socket path of the raylet that started the
	// worker.
	EnvRayletSocket = "GORAY_RAYLET_SOCKET"
	// EnvWorkerID is the worker's id (hex); the worker must present it in
	// its WorkerSession registration.
	EnvWorkerID = "GORAY_WORKER_ID"
	// EnvNodeID is the node's id (hex).
	EnvNodeID = "GORAY_NODE_ID"
	// EnvJobID is the id (hex) of the job the worker serves.
	EnvJobID = "GORAY_JOB_ID"
	// EnvSessionDir is the node's session directory; workers put their
	// sockets in its "sockets" subdirectory.
	EnvSessionDir = "GORAY_SESSION_DIR"
	// EnvLogLevel is the hclog level name the worker should log at.
	EnvLogLevel = "GORAY_LOG_LEVEL"
	// EnvNodeIP is the IP address the worker listens on for other nodes.
	EnvNodeIP = "GORAY_NODE_IP"
)

// workerEnvNames lists every variable above; inherited values of these are
// replaced, never duplicated.
var workerEnvNames = []string{
	EnvWorker, EnvRayletSocket, EnvWorkerID, EnvNodeID, EnvJobID, EnvSessionDir, EnvLogLevel, EnvNodeIP,
}
