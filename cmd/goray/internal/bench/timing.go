package bench

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// timing is Ray's timeit method: warm up by calling fn for warmup and
// counting the calls; step = count/10 + 1; then rounds rounds, each calling
// fn in groups of step until at least round has passed.
type timing struct {
	warmup time.Duration
	round  time.Duration
	rounds int
	now    func() time.Time
}

// rayTiming is the timing Ray's microbenchmark uses.
func rayTiming() timing {
	return timing{warmup: time.Second, round: 2 * time.Second, rounds: 4, now: time.Now}
}

// quickTiming is the short timing for CI smoke runs.
func quickTiming() timing {
	return timing{warmup: 200 * time.Millisecond, round: 300 * time.Millisecond, rounds: 2, now: time.Now}
}

// describe says how figures were measured (for reports).
func (t timing) describe() string {
	return fmt.Sprintf("Ray's timeit: warm-up %s counting calls, step = count/10 + 1, %d rounds of at least %s calling fn in groups of step; figure = multiplier × calls / seconds; mean and population SD of the rounds",
		t.warmup, t.rounds, t.round)
}

// round is one timed round.
type round struct {
	calls int
	secs  float64
}

// measure runs fn with the timing and returns the timed rounds. It stops at
// the first error of fn or when ctx ends. beat, when not nil, is
// incremented after every warm-up call and every group of timed calls, so a
// watchdog can tell a stalled call from a slow metric without adding work
// to each timed call.
func (t timing) measure(ctx context.Context, fn func(context.Context) error, beat *atomic.Int64) ([]round, error) {
	tick := func() {
		if beat != nil {
			beat.Add(1)
		}
	}
	call := func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(ctx)
	}
	start := t.now()
	count := 0
	for t.now().Sub(start) < t.warmup {
		if err := call(); err != nil {
			return nil, fmt.Errorf("warm-up call %d: %w", count+1, err)
		}
		count++
		tick()
	}
	step := count/10 + 1
	rounds := make([]round, 0, t.rounds)
	for r := 0; r < t.rounds; r++ {
		start := t.now()
		calls := 0
		var end time.Time
		for {
			for i := 0; i < step; i++ {
				if err := call(); err != nil {
					return nil, fmt.Errorf("round %d, call %d: %w", r+1, calls+i+1, err)
				}
			}
			calls += step
			tick()
			end = t.now()
			if end.Sub(start) >= t.round {
				break
			}
		}
		rounds = append(rounds, round{calls: calls, secs: end.Sub(start).Seconds()})
	}
	return rounds, nil
}

// rates returns multiplier × calls / seconds for each round.
func rates(rs []round, multiplier float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = multiplier * float64(r.calls) / r.secs
	}
	return out
}

// latenciesMicros returns the time per call in microseconds for each round.
func latenciesMicros(rs []round) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = 1e6 * r.secs / float64(r.calls)
	}
	return out
}

// meanSD returns the mean and the population standard deviation (numpy's
// default, as Ray reports).
func meanSD(xs []float64) (mean, sd float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)))
}
