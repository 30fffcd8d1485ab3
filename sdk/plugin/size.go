package plugin

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/dustin/go-humanize"
)

// ErrInvalidSize is wrapped by the errors ParseSize returns.
var ErrInvalidSize = errors.New("invalid size")

// ParseSize parses a byte size: a plain integer number of bytes ("1048576")
// or a number with an IEC or SI unit ("2GiB", "512MB", "100KiB", "1.5 GB").
// The error wraps ErrInvalidSize and names the bad value. It is the one size
// parser of goray: node config (package config), plugin config blocks and
// the CLI's flags all use it.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("%w %q: empty", ErrInvalidSize, s)
	}
	if strings.HasPrefix(t, "-") {
		return 0, fmt.Errorf("%w %q: sizes cannot be negative", ErrInvalidSize, s)
	}
	n, err := humanize.ParseBytes(t)
	if err != nil {
		return 0, fmt.Errorf("%w %q: not a number of bytes or a size such as \"512MiB\" or \"2GiB\"", ErrInvalidSize, s)
	}
	if n > math.MaxInt64 {
		return 0, fmt.Errorf("%w %q: too large", ErrInvalidSize, s)
	}
	return int64(n), nil
}
