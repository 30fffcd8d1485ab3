package plugintest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/plugin/plugintest"
)

func TestEventually(t *testing.T) {
	notYet := errors.New("not yet")
	tests := []struct {
		name string
		// okAfter is the call from which cond returns nil (0: never).
		okAfter int
		timeout time.Duration
		want    []error // what the error matches; none: nil
	}{
		{"at once", 1, time.Second, nil},
		{"third call", 3, 10 * time.Second, nil},
		{"never", 0, 200 * time.Millisecond, []error{notYet, context.DeadlineExceeded}},
		{"ctx over, cond holds", 1, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			calls := 0
			err := plugintest.Eventually(ctx, func() error {
				calls++
				if tt.okAfter > 0 && calls >= tt.okAfter {
					return nil
				}
				return notYet
			})
			if len(tt.want) == 0 && err != nil {
				t.Fatalf("Eventually: %v after %d calls", err, calls)
			}
			for _, w := range tt.want {
				if !errors.Is(err, w) {
					t.Errorf("Eventually: %v; want it to match %v", err, w)
				}
			}
			if tt.okAfter > 0 && calls != tt.okAfter {
				t.Errorf("cond called %d times, want %d", calls, tt.okAfter)
			}
		})
	}
}
