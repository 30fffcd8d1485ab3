package instance

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	type step struct {
		op       string // "fail", "ok"
		nodeType string
		at       time.Duration
	}
	type probe struct {
		nodeType string
		at       time.Duration
		allow    bool
	}
	tests := []struct {
		name         string
		initial, max time.Duration
		steps        []step
		probes       []probe
		failures     int // of "cpu" at the end
	}{
		{"no failure allows", 0, 0, nil, []probe{{"cpu", 0, true}}, 0},
		{"first failure: the initial delay", 0, 0,
			[]step{{"fail", "cpu", 0}},
			[]probe{{"cpu", 0, false}, {"cpu", DefaultBackoffInitial - 1, false}, {"cpu", DefaultBackoffInitial, true}, {"gpu", 0, true}}, 1},
		{"doubles with each consecutive failure", time.Second, time.Hour,
			[]step{{"fail", "cpu", 0}, {"fail", "cpu", 1 * time.Second}, {"fail", "cpu", 3 * time.Second}},
			// 1s, then 2s (until 3s), then 4s (until 7s).
			[]probe{{"cpu", 7*time.Second - 1, false}, {"cpu", 7 * time.Second, true}}, 3},
		{"capped at max", time.Second, 5 * time.Second,
			[]step{{"fail", "cpu", 0}, {"fail", "cpu", 1 * time.Second}, {"fail", "cpu", 3 * time.Second}, {"fail", "cpu", 8 * time.Second}, {"fail", "cpu", 13 * time.Second}},
			// 1s, 2s, 4s, 5s (until 13s), 5s (until 18s).
			[]probe{{"cpu", 18*time.Second - 1, false}, {"cpu", 18 * time.Second, true}}, 5},
		{"failures while backing off do not lengthen it", time.Second, time.Hour,
			[]step{{"fail", "cpu", 0}, {"fail", "cpu", 0}, {"fail", "cpu", 500 * time.Millisecond}},
			[]probe{{"cpu", time.Second, true}}, 3},
		{"the next attempt's failure doubles", time.Second, time.Hour,
			[]step{{"fail", "cpu", 0}, {"fail", "cpu", 0}, {"fail", "cpu", 2 * time.Second}},
			[]probe{{"cpu", 4*time.Second - 1, false}, {"cpu", 4 * time.Second, true}}, 3},
		{"a success resets", time.Second, time.Hour,
			[]step{{"fail", "cpu", 0}, {"fail", "cpu", 1 * time.Second}, {"ok", "cpu", 2 * time.Second}, {"fail", "cpu", 10 * time.Second}},
			// Back to 1s after the success.
			[]probe{{"cpu", 11*time.Second - 1, false}, {"cpu", 11 * time.Second, true}}, 1},
		{"a success allows at once", time.Second, time.Hour,
			[]step{{"fail", "cpu", 0}, {"ok", "cpu", 0}},
			[]probe{{"cpu", 0, true}}, 0},
		{"types back off independently", time.Second, time.Hour,
			[]step{{"fail", "cpu", 0}, {"fail", "gpu", 0}, {"fail", "gpu", time.Second}, {"ok", "cpu", time.Second}},
			[]probe{{"cpu", time.Second, true}, {"gpu", 3*time.Second - 1, false}, {"gpu", 3 * time.Second, true}}, 0},
		{"max below initial is raised to it", time.Minute, time.Second,
			[]step{{"fail", "cpu", 0}, {"fail", "cpu", time.Minute}},
			[]probe{{"cpu", 2*time.Minute - 1, false}, {"cpu", 2 * time.Minute, true}}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBackoff(tc.initial, tc.max)
			for _, s := range tc.steps {
				if s.op == "fail" {
					b.Failed(s.nodeType, t0.Add(s.at))
				} else {
					b.Succeeded(s.nodeType)
				}
			}
			for _, p := range tc.probes {
				if got := b.Allow(p.nodeType, t0.Add(p.at)); got != p.allow {
					t.Errorf("Allow(%s, +%v) = %v, want %v", p.nodeType, p.at, got, p.allow)
				}
			}
			failures, retryAt := b.Status("cpu")
			if failures != tc.failures {
				t.Errorf("Status failures = %d, want %d", failures, tc.failures)
			}
			if (failures == 0) != retryAt.IsZero() {
				t.Errorf("Status retryAt = %v with %d failures", retryAt, failures)
			}
		})
	}
}

// TestBackoffGrowth follows the delays of consecutive failures, each
// reported when the previous delay ended.
func TestBackoffGrowth(t *testing.T) {
	b := NewBackoff(0, 0)
	now := t0
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute}
	for i, d := range want {
		b.Failed("cpu", now)
		_, retryAt := b.Status("cpu")
		if got := retryAt.Sub(now); got != d {
			t.Fatalf("failure %d: delay %v, want %v", i+1, got, d)
		}
		now = retryAt
	}
}
