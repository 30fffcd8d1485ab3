package plugintest

import (
	"context"
	"errors"
	"time"
)

// eventuallyInterval is how often Eventually calls its condition again.
const eventuallyInterval = 50 * time.Millisecond

// Eventually calls cond every 50 ms (a polling interval for state a test
// cannot be told about, such as a process that exits or a node that
// joins; not synchronisation) until it returns nil or ctx ends. It
// returns nil, or cond's last error joined with ctx's.
func Eventually(ctx context.Context, cond func() error) error {
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(eventuallyInterval):
		}
	}
}
