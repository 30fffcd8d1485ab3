package config

import "testing"

func TestDashboardBlock(t *testing.T) {
	const head = "head {}\n"
	n, diags := Parse([]byte(head+"dashboard {\n  host = \"10.0.0.5\"\n  port = -1\n  max_binary_size = \"64MiB\"\n  max_running_jobs = 4\n}\n"), "goray.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if vd := n.Validate(); len(vd) != 0 {
		t.Fatal(vd)
	}
	want := Dashboard{Host: "10.0.0.5", Port: -1, MaxBinaryBytes: 64 << 20, MaxRunningJobs: 4}
	if n.Dashboard != want {
		t.Fatalf("dashboard = %+v, want %+v", n.Dashboard, want)
	}
	// Flags win over the file.
	port := 9000
	n.Override(Flags{DashboardHost: "127.0.0.2", DashboardPort: &port, NoDashboard: true})
	if n.Dashboard.Host != "127.0.0.2" || n.Dashboard.Port != 9000 || !n.Dashboard.Disabled {
		t.Fatalf("after flags: %+v", n.Dashboard)
	}
	for _, tc := range []diagCase{
		{name: "port below -1", src: head + "dashboard {\n  port = -2\n}\n", line: 3, col: 10, want: []string{"dashboard.port must be -1"}},
		{name: "negative binary size", src: head + "dashboard {\n  max_binary_size = -1\n}\n", line: 3, col: 21, want: []string{"max_binary_size", "not a whole, non-negative number"}},
		{name: "binary size above 1 TiB", src: head + "dashboard {\n  max_binary_size = \"2TiB\"\n}\n", line: 3, col: 21, want: []string{"dashboard.max_binary_size must be from 1 byte to 1 TiB"}},
		{name: "too many jobs", src: head + "dashboard {\n  max_running_jobs = 5000\n}\n", line: 3, col: 22, want: []string{"dashboard.max_running_jobs must be from 1 to 4096"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			if diags.HasErrors() {
				checkDiag(t, diags, n.Files(), tc)
				return
			}
			checkDiag(t, n.Validate(), n.Files(), tc)
		})
	}
}
