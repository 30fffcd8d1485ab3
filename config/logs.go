package config

import "github.com/hashicorp/hcl/v2"

// Bounds of the logs block.
const (
	// DefaultLogMaxFileSize is logs.max_file_size when left out (Ray's
	// RAY_ROTATION_MAX_BYTES, 512 MiB).
	DefaultLogMaxFileSize = 512 << 20
	// DefaultLogMaxFiles is logs.max_files when left out (Ray's
	// RAY_ROTATION_BACKUP_COUNT, 5).
	DefaultLogMaxFiles = 5
	// MinLogFileSize is the smallest logs.max_file_size (files rotate in
	// whole MiB).
	MinLogFileSize = 1 << 20
	// maxLogFileSize and maxLogFiles are the largest values accepted.
	maxLogFileSize = 1 << 40
	maxLogFiles    = 1000
)

// Logs bounds every log file of the node (the logs block): node.log,
// gcs.log, the plugins' logs, the workers' .out and .err files and the
// job drivers' logs each rotate once they reach max_file_size, keeping
// max_files rotated copies beside the file being written, so that one log
// takes at most max_file_size × (max_files + 1) of disk (docs/logs.md):
//
//	logs {
//	  max_file_size = "512MiB"   # Ray's RAY_ROTATION_MAX_BYTES; whole MiB, at least 1MiB
//	  max_files     = 5          # rotated copies kept (Ray's RAY_ROTATION_BACKUP_COUNT)
//	}
type Logs struct {
	// MaxFileSize is the size at which a log file rotates, in bytes (0:
	// DefaultLogMaxFileSize).
	MaxFileSize int64
	// MaxFiles is how many rotated files of each log are kept (0:
	// DefaultLogMaxFiles).
	MaxFiles int
}

const (
	keyLogsMaxFileSize = "logs.max_file_size"
	keyLogsMaxFiles    = "logs.max_files"
)

var logsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "max_file_size"}, {Name: "max_files"}},
}

// logs decodes the logs block (b may be nil).
func (d *decoder) logs(b *hcl.Block) {
	if b == nil {
		return
	}
	c := d.content(b.Body, logsSchema)
	d.size(c.Attributes["max_file_size"], keyLogsMaxFileSize, &d.n.Logs.MaxFileSize)
	d.intVal(c.Attributes["max_files"], keyLogsMaxFiles, &d.n.Logs.MaxFiles)
}

// logs checks the logs block: a file size from 1 MiB to 1 TiB, a count of
// rotated files from 1 to 1000 (0 for either: the default).
func (v *validator) logs() {
	l := v.n.Logs
	if s := l.MaxFileSize; s != 0 && (s < MinLogFileSize || s > maxLogFileSize) {
		v.errorf(keyLogsMaxFileSize, "Invalid size",
			"logs.max_file_size is the size at which a log file rotates and must be from 1MiB to 1TiB, got %d bytes; leave it out for 512MiB.", s)
	}
	if n := l.MaxFiles; n < 0 || n > maxLogFiles {
		v.errorf(keyLogsMaxFiles, "Invalid count",
			"logs.max_files is how many rotated files of each log are kept and must be from 1 to %d, got %d; leave it out for %d.",
			maxLogFiles, n, DefaultLogMaxFiles)
	}
}
