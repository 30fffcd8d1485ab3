// Package jobs is the head's job API: jobs submitted over HTTP run on the
// head as driver processes of the cluster, as Ray's job submission does.
//
// Three parts, each with its own state:
//
//   - Binaries (binaries.go): the job binaries, content-addressed by
//     sha256 in the head's data directory, uploaded only when missing and
//     checked against their hash while they are written.
//   - Supervisor (supervisor.go): the jobs. It runs each job's binary as a
//     driver (its own process group, GORAY_ADDRESS of this cluster, the
//     token in its environment, its working directory and log file in the
//     session), moves its status PENDING → RUNNING → SUCCEEDED / FAILED /
//     STOPPED, stops it (SIGTERM to its process group, SIGKILL after a
//     grace period), links it to the goray job its driver registers, and
//     keeps every record in the GCS KV (namespace KVNamespace) so the
//     records outlive a restart of the head.
//   - The handlers (handlers.go): decode a request, call one of the two,
//     encode the answer. Register mounts them on the dashboard server.
//
// The wire types below are shared with the client (dashboard/jobclient).
package jobs

import "time"

// Status is a job's state.
type Status string

// The states of a job (Ray's JobStatus).
const (
	// StatusPending: accepted, its driver not started yet (it waits for a
	// free slot: at most Options.MaxRunning drivers run at once).
	StatusPending Status = "PENDING"
	// StatusRunning: its driver runs.
	StatusRunning Status = "RUNNING"
	// StatusSucceeded: its driver exited with status 0.
	StatusSucceeded Status = "SUCCEEDED"
	// StatusFailed: its driver exited non-zero, was killed by a signal
	// nobody sent through the API, or could not start.
	StatusFailed Status = "FAILED"
	// StatusStopped: stopped through the API (or by the head stopping).
	StatusStopped Status = "STOPPED"
)

// Terminal reports whether s is a final state.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusStopped
}

// Job is a submitted job as the API shows it.
type Job struct {
	// SubmissionID names the job in the API (given at submission, or
	// "gorayjob_" and random characters).
	SubmissionID string `json:"submission_id"`
	// Status is the job's state; Message says why it is in it (the exit
	// status or signal of a finished driver).
	Status  Status `json:"status"`
	Message string `json:"message,omitempty"`
	// BinarySHA256 is the job's binary; Args its arguments.
	BinarySHA256 string   `json:"binary_sha256"`
	Args         []string `json:"args,omitempty"`
	// EnvNames are the names of the variables the submission set (their
	// values are not shown).
	EnvNames []string `json:"env_names,omitempty"`
	// Metadata is the submission's key/value metadata.
	Metadata map[string]string `json:"metadata,omitempty"`
	// GorayJobID is the id of the goray job the driver registered (the
	// JOB ID of `goray list jobs`), once it connected.
	GorayJobID string `json:"goray_job_id,omitempty"`
	// DriverPid is the driver's process id on the head (0 before it ran).
	DriverPid int `json:"driver_pid,omitempty"`
	// ExitCode is the driver's exit status (-1 when a signal ended it);
	// set once it finished.
	ExitCode *int `json:"exit_code,omitempty"`
	// SubmitTime, StartTime and EndTime are when the job was accepted,
	// its driver started and ended.
	SubmitTime time.Time  `json:"submit_time"`
	StartTime  *time.Time `json:"start_time,omitempty"`
	EndTime    *time.Time `json:"end_time,omitempty"`
	// LogFile is the driver's stdout and stderr on the head.
	LogFile string `json:"log_file,omitempty"`
	// WorkingDir is the driver's working directory on the head.
	WorkingDir string `json:"working_dir,omitempty"`
	// WorkingDirSHA256 is the working dir the job ships (an uploaded
	// archive), unpacked into WorkingDir/working_dir, where the driver
	// starts; every worker starts in a copy on its node. "" for none.
	WorkingDirSHA256 string `json:"working_dir_sha256,omitempty"`
}

// SubmitRequest is the body of POST /api/jobs/.
type SubmitRequest struct {
	// BinarySHA256 names an uploaded binary (PUT /api/binaries/{sha256}).
	BinarySHA256 string `json:"binary_sha256"`
	// Args are the driver's arguments (without the program name).
	Args []string `json:"args,omitempty"`
	// Env are NAME=value variables added to the driver's environment.
	Env []string `json:"env,omitempty"`
	// Metadata is kept with the job.
	Metadata map[string]string `json:"metadata,omitempty"`
	// SubmissionID, when set, names the job (unique; letters, digits,
	// '_', '-' and '.', at most 128, starting with a letter or digit).
	SubmissionID string `json:"submission_id,omitempty"`
	// WorkingDirSHA256, when set, names an uploaded working-dir archive
	// (PUT /api/binaries/{sha256}, as internal/workdir packs it; `goray job
	// submit --working-dir` does both), as Ray's runtime_env working_dir:
	// the driver starts in the unpacked directory and ships it to its
	// workers ($GORAY_WORKING_DIR, sdk/ray's WorkingDir).
	WorkingDirSHA256 string `json:"working_dir_sha256,omitempty"`
}

// SubmitResponse is the answer to POST /api/jobs/.
type SubmitResponse struct {
	SubmissionID string `json:"submission_id"`
}

// ListResponse is the answer to GET /api/jobs/.
type ListResponse struct {
	Jobs []Job `json:"jobs"`
}

// StopResponse is the answer to POST /api/jobs/{id}/stop.
type StopResponse struct {
	// Stopped is false when the job had already finished.
	Stopped bool `json:"stopped"`
}

// DeleteResponse is the answer to DELETE /api/jobs/{id}.
type DeleteResponse struct {
	Deleted bool `json:"deleted"`
}

// BinaryResponse is the answer to PUT /api/binaries/{sha256}.
type BinaryResponse struct {
	SHA256 string `json:"sha256"`
	// Size is the binary's size in bytes.
	Size int64 `json:"size"`
	// Uploaded is false when the head had it already (nothing was read).
	Uploaded bool `json:"uploaded"`
}

// StatsResponse is the answer to GET /api/binaries/: what the binary
// store received since the head started.
type StatsResponse struct {
	// Uploads counts binaries written; Bytes their size.
	Uploads int64 `json:"uploads"`
	Bytes   int64 `json:"bytes"`
}
