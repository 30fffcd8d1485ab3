package config

import "github.com/goray-dev/goray/sdk/plugin"

// ErrInvalidSize is wrapped by the errors ParseSize returns (it is
// plugin.ErrInvalidSize).
var ErrInvalidSize = plugin.ErrInvalidSize

// ParseSize parses a byte size: a plain integer number of bytes ("1048576")
// or a number with an IEC or SI unit ("2GiB", "512MB", "100KiB", "1.5 GB").
// The error wraps ErrInvalidSize and names the bad value. It is
// plugin.ParseSize, the one size parser shared with plugin config blocks.
func ParseSize(s string) (int64, error) { return plugin.ParseSize(s) }
