package config

import "testing"

func TestGCSHistory(t *testing.T) {
	const head = "head {}\n"
	ok := []struct {
		name, src string
		want      GCSHistory
	}{
		{"left out", "", GCSHistory{}},
		{"every cap", "gcs {\n  history {\n    dead_nodes = 5\n    dead_actors = 6\n    finished_jobs = 7\n    removed_placement_groups = 8\n    task_events = 9\n  }\n}\n",
			GCSHistory{DeadNodes: 5, DeadActors: 6, FinishedJobs: 7, RemovedPlacementGroups: 8, TaskEvents: 9}},
		{"one cap, beside redis", "gcs {\n  history {\n    dead_actors = 1\n  }\n  redis {\n    address = \"127.0.0.1:6379\"\n  }\n}\n",
			GCSHistory{DeadActors: 1}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(head+tc.src), "goray.hcl")
			if diags.HasErrors() {
				t.Fatalf("%q: %v", tc.src, diags)
			}
			if vd := n.Validate(); vd.HasErrors() {
				t.Fatalf("%q: Validate() = %v", tc.src, vd)
			}
			if n.GCS.History != tc.want {
				t.Fatalf("%q: got %+v, want %+v", tc.src, n.GCS.History, tc.want)
			}
		})
	}

	bad := []diagCase{
		{name: "zero", src: head + "gcs {\n  history {\n    dead_nodes = 0\n  }\n}\n",
			line: 4, col: 18, want: []string{"gcs.history.dead_nodes", "at least 1", "got 0", "leave it out for 1000"}},
		{name: "negative", src: head + "gcs {\n  history {\n    task_events = -3\n  }\n}\n",
			line: 4, col: 19, want: []string{"gcs.history.task_events", "got -3", "100000"}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			if diags.HasErrors() {
				t.Fatalf("Parse: %v", diags)
			}
			checkDiag(t, n.Validate(), n.Files(), tc)
		})
	}

	decodeErrs := []diagCase{
		{name: "not a number", src: head + "gcs {\n  history {\n    dead_actors = \"many\"\n  }\n}\n",
			line: 4, col: 19, want: []string{"dead_actors", "whole number"}},
		{name: "unknown setting", src: head + "gcs {\n  history {\n    dead_node = 10\n  }\n}\n",
			line: 4, col: 5, want: []string{"dead_node", "dead_nodes"}},
		{name: "two blocks", src: head + "gcs {\n  history {\n  }\n  history {\n  }\n}\n",
			line: 5, col: 3, want: []string{"history"}},
	}
	for _, tc := range decodeErrs {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			checkDiag(t, diags, n.Files(), tc)
		})
	}
}
