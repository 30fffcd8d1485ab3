package config

import (
	"fmt"
	"maps"
	"strconv"

	"github.com/hashicorp/hcl/v2"
)

// Environment variables that set the logs block's values the file leaves
// out (ApplyEnv); the raylet also gives them to workers, for their own
// log.
const (
	EnvLogMaxFileSize = "GORAY_LOG_MAX_FILE_SIZE"
	EnvLogMaxFiles    = "GORAY_LOG_MAX_FILES"
)

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

	// envErr is why a variable ApplyEnv read could not be used.
	envErr string
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

// applyLogsEnv fills the logs block's values the file leaves out from
// $GORAY_LOG_MAX_FILE_SIZE and $GORAY_LOG_MAX_FILES (ApplyEnv calls it); a
// value it cannot parse is reported by Validate, naming the variable.
func (n *Node) applyLogsEnv(getenv func(string) string) {
	fill := func(key, name string, set func(string) error) {
		v := getenv(name)
		if v == "" {
			return
		}
		if _, inFile := n.ranges[key]; inFile {
			return // the file wins
		}
		if err := set(v); err != nil {
			n.Logs.envErr = fmt.Sprintf("$%s=%q: %v", name, v, err)
			return
		}
		n.fromEnv = maps.Clone(n.fromEnv)
		if n.fromEnv == nil {
			n.fromEnv = map[string]string{}
		}
		n.fromEnv[key] = name
	}
	fill(keyLogsMaxFileSize, EnvLogMaxFileSize, func(v string) error {
		s, err := ParseSize(v)
		if err == nil {
			n.Logs.MaxFileSize = s
		}
		return err
	})
	fill(keyLogsMaxFiles, EnvLogMaxFiles, func(v string) error {
		c, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("not a whole number")
		}
		n.Logs.MaxFiles = c
		return nil
	})
}

// logs checks the logs block: a file size from 1 MiB to 1 TiB, a count of
// rotated files from 1 to 1000 (0 for either: the default). A value from
// the environment is named by its variable.
func (v *validator) logs() {
	l := v.n.Logs
	what := func(key string) string {
		if env, ok := v.n.fromEnv[key]; ok {
			return "$" + env
		}
		return key
	}
	if l.envErr != "" {
		v.errorf("", "Invalid environment variable", "%s; it sets the logs block (docs/logs.md).", l.envErr)
	}
	if s := l.MaxFileSize; s != 0 && (s < MinLogFileSize || s > maxLogFileSize) {
		v.errorf(keyLogsMaxFileSize, "Invalid size",
			"%s is the size at which a log file rotates and must be from 1MiB to 1TiB, got %d bytes; leave it out for 512MiB.", what(keyLogsMaxFileSize), s)
	}
	if n := l.MaxFiles; n < 0 || n > maxLogFiles {
		v.errorf(keyLogsMaxFiles, "Invalid count",
			"%s is how many rotated files of each log are kept and must be from 1 to %d, got %d; leave it out for %d.",
			what(keyLogsMaxFiles), maxLogFiles, n, DefaultLogMaxFiles)
	}
}
