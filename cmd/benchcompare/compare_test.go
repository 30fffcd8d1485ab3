package main

import (
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name       string
		unit       string
		base, head side
		change     float64
		verdict    string
	}{
		{"rate up, apart", "/s", side{90, 100, 95}, side{120, 130, 125}, 125.0/95 - 1, "better"},
		{"rate down, apart", "/s", side{90, 100, 95}, side{50, 60, 55}, 55.0/95 - 1, "worse"},
		{"rate up, overlapping", "/s", side{90, 100, 95}, side{99, 110, 105}, 105.0/95 - 1, "~"},
		{"latency down is better", "µs", side{10, 12, 11}, side{5, 6, 5.5}, 11/5.5 - 1, "better"},
		{"latency up is worse", "µs", side{10, 12, 11}, side{20, 21, 22}, 11.0/21 - 1, "worse"},
		{"bandwidth even count median", "GB/s", side{1, 2, 3, 4}, side{5, 6}, 5.5/2.5 - 1, "better"},
		{"one run: no verdict", "/s", side{100}, side{200}, 1, "one run: no verdict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			change, verdict := judge(tc.unit, tc.base, tc.head)
			if verdict != tc.verdict || change-tc.change > 1e-9 || tc.change-change > 1e-9 {
				t.Fatalf("judge = %+.4f %q, want %+.4f %q", change, verdict, tc.change, tc.verdict)
			}
		})
	}
}

func TestCompareTable(t *testing.T) {
	run := func(calls, put float64, extra bool) report {
		r := report{
			Metrics: []result{{Name: "1_1_actor_calls_async", Mean: calls, Unit: "/s", Status: "ok"}, {Name: "single_client_put_calls", Mean: put, Unit: "/s", Status: "ok"}},
			Limits:  []result{{Name: "memcpy", Mean: 10, Unit: "GB/s", Status: "ok"}},
		}
		if extra {
			r.Metrics = append(r.Metrics, result{Name: "new_metric", Mean: 1, Unit: "/s", Status: "ok"})
		}
		r.Metrics = append(r.Metrics, result{Name: "broken", Unit: "/s", Status: "error"})
		return r
	}
	base := []report{run(40000, 9000, false), run(42000, 9100, false)}
	head := []report{run(60000, 9050, true), run(61000, 8900, true)}
	var b strings.Builder
	writeTable(&b, compare(base, head))
	out := b.String()
	for _, want := range []string{
		"1_1_actor_calls_async", "41000 [40000–42000]", "60500 [60000–61000]", "+47.6%", "better",
		"single_client_put_calls", "~",
		"new_metric", "only in head",
		"broken", "no figures",
		"limit: memcpy",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "limit: memcpy") < strings.Index(out, "broken") {
		t.Errorf("limits come before metrics:\n%s", out)
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-base: a revision is required"},
		{[]string{"-base", "HEAD", "-runs", "0"}, "-runs 0: want at least 1"},
		{[]string{"-base", "no-such-revision-anywhere", "-out", t.TempDir()}, `-base "no-such-revision-anywhere": not a revision`},
	} {
		err := run(tc.args, &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
