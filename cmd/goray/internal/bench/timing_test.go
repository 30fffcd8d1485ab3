package bench

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock advances only when the measured function runs.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// fakeTiming is Ray's timing on a clock that advances per call by the
// runner's fn (see fakeFn) or, for runner tests, by every clock read.
func fakeTiming(perRead time.Duration) timing {
	c := &fakeClock{t: time.Unix(0, 0)}
	tm := rayTiming()
	tm.now = func() time.Time { c.t = c.t.Add(perRead); return c.t }
	return tm
}

func TestMeasureFollowsRay(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	tm := rayTiming()
	tm.now = c.now
	calls := 0
	fn := func(context.Context) error {
		calls++
		c.t = c.t.Add(10 * time.Millisecond)
		return nil
	}
	var beat atomic.Int64
	rs, err := tm.measure(context.Background(), fn, &beat)
	if err != nil {
		t.Fatal(err)
	}
	// Warm-up: 100 calls in 1 s, so step = 11; each round runs groups of 11
	// calls (110 ms) until 2 s have passed: 19 groups, 209 calls, 2.09 s.
	if len(rs) != 4 {
		t.Fatalf("%d rounds, want 4", len(rs))
	}
	for i, r := range rs {
		if r.calls != 209 || math.Abs(r.secs-2.09) > 1e-9 {
			t.Errorf("round %d = %d calls in %v s, want 209 in 2.09 s", i, r.calls, r.secs)
		}
	}
	if calls != 100+4*209 {
		t.Errorf("fn called %d times, want %d", calls, 100+4*209)
	}
	if got := beat.Load(); got != 100+4*19 {
		t.Errorf("%d heartbeats, want one per warm-up call and per group: %d", got, 100+4*19)
	}
	mean, sd := meanSD(rates(rs, 3))
	if math.Abs(mean-300) > 1e-9 || sd > 1e-9 {
		t.Errorf("rates: mean %v sd %v, want 300 and 0", mean, sd)
	}
	lat, _ := meanSD(latenciesMicros(rs))
	if math.Abs(lat-10000) > 1e-6 {
		t.Errorf("latency %v µs, want 10000", lat)
	}
}

func TestMeasureStops(t *testing.T) {
	boom := errors.New("boom")
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	tests := []struct {
		name string
		ctx  context.Context
		fn   func(context.Context) error
		want error
	}{
		{"fn error", context.Background(), func(context.Context) error { return boom }, boom},
		{"context cancelled", ctx, func(context.Context) error {
			if n++; n == 5 {
				cancel()
			}
			return nil
		}, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := quickTiming().measure(tc.ctx, tc.fn, nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("measure error = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestMeanSD(t *testing.T) {
	tests := []struct {
		in       []float64
		mean, sd float64
	}{
		{nil, 0, 0},
		{[]float64{5}, 5, 0},
		{[]float64{1, 2, 3, 4}, 2.5, math.Sqrt(1.25)},
		{[]float64{10, 10, 10, 10}, 10, 0},
	}
	for _, tc := range tests {
		m, s := meanSD(tc.in)
		if math.Abs(m-tc.mean) > 1e-12 || math.Abs(s-tc.sd) > 1e-12 {
			t.Errorf("meanSD(%v) = %v, %v; want %v, %v", tc.in, m, s, tc.mean, tc.sd)
		}
	}
}
