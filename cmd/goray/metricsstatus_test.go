package main

import (
	"strings"
	"testing"
)

func TestWriteMetricsLine(t *testing.T) {
	head := nodeStatus{State: stateAlive, IsHead: true, SessionDir: "/tmp/goray/session_x", MetricsAddress: "127.0.0.1:9100"}
	worker := nodeStatus{State: stateAlive, MetricsAddress: "127.0.0.2:9100"}
	off := nodeStatus{State: stateAlive}
	dead := nodeStatus{State: "DEAD", MetricsAddress: "127.0.0.3:9100"}
	cases := []struct {
		name  string
		nodes []nodeStatus
		want  string
	}{
		{"head and worker", []nodeStatus{head, worker, dead}, "Metrics: 2 of 2 alive nodes serve Prometheus metrics; Prometheus file_sd targets: /tmp/goray/session_x/metrics/prometheus_sd.json (on the head's machine)\n"},
		{"one off", []nodeStatus{head, off}, "Metrics: 1 of 2 alive nodes serve Prometheus metrics; Prometheus file_sd targets: /tmp/goray/session_x/metrics/prometheus_sd.json (on the head's machine)\n"},
		{"head off", []nodeStatus{{State: stateAlive, IsHead: true, SessionDir: "/s"}, worker}, "Metrics: 1 of 2 alive nodes serve Prometheus metrics\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := statusReport{Nodes: tc.nodes}
			for _, n := range tc.nodes {
				if n.State == stateAlive {
					r.AliveNodes++
				}
			}
			var b strings.Builder
			writeMetricsLine(&b, r)
			if b.String() != tc.want {
				t.Fatalf("got %q\nwant %q", b.String(), tc.want)
			}
		})
	}
}
