package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sampleReport() *Report {
	return &Report{
		Machine: Machine{Cores: 2, MemoryBytes: 24 << 30, GoVersion: "go1.26", OS: "linux", Arch: "amd64", CPUModel: "Test CPU"},
		Commit:  "0123456789abcdef0123", Date: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Command: "goray microbenchmark",
		Method: "ray",
		Limits: []Result{{Name: LimitGRPC, Mean: 52.345, SD: 1.2, Unit: UnitMicros, Status: StatusOK, Note: "bare"}},
		Metrics: []Result{
			{Name: MetricTasksSync, Mean: 4321.9, SD: 12.3, Unit: UnitPerSecond, Status: StatusOK, LimitName: LimitGRPC, LimitValue: 52.345, Ratio: 4.42},
			{Name: MetricPlacementGroup, Unit: UnitPerSecond, Status: StatusNotAvailable, Note: "goray has no placement groups yet"},
			{Name: MetricGet10kRefs, Unit: UnitPerSecond, Status: StatusError, Error: "owner died | badly"},
		},
	}
}

func TestFailed(t *testing.T) {
	r := sampleReport()
	r.Limits = append(r.Limits, Result{Name: LimitPlugin, Status: StatusError, Error: "x"})
	f := r.Failed()
	if len(f) != 1 || f[0].Name != MetricGet10kRefs {
		t.Fatalf("Failed() = %+v, want only %s", f, MetricGet10kRefs)
	}
}

func TestWriteTableAndMarkdown(t *testing.T) {
	r := sampleReport()
	var tab, md bytes.Buffer
	if err := r.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		out  string
		want []string
	}{
		{tab.String(), []string{"4,322 ± 12", "52.3 ± 1.2", "grpc_unary_round_trip = 52.3 µs", "4.42×", "not available", "ERROR", "single_client_get_object_containing_10k_refs: owner died | badly", "Test CPU", "0123456789ab;"}},
		{md.String(), []string{"| single_client_tasks_sync | 4,322 ± 12 | /s | grpc_unary_round_trip = 52.3 µs | 4.42× |", "| placement_group_create/removal | not available |", "| ERROR |", `error: owner died \| badly`, "`goray microbenchmark`", "#### Limits"}},
	}
	for i, tc := range tests {
		for _, w := range tc.want {
			if !strings.Contains(tc.out, w) {
				t.Errorf("output %d lacks %q:\n%s", i, w, tc.out)
			}
		}
	}
}

func TestFormatNum(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{0, "0.000"},
		{0.1234, "0.123"},
		{3.14159, "3.14"},
		{42.42, "42.4"},
		{999.6, "1,000"},
		{1234567.8, "1,234,568"},
		{-12345, "-12,345"},
	}
	for _, tc := range tests {
		if got := formatNum(tc.v, decimals(tc.v)); got != tc.want {
			t.Errorf("formatNum(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestProcFiles(t *testing.T) {
	dir := t.TempDir()
	mem := filepath.Join(dir, "meminfo")
	cpu := filepath.Join(dir, "cpuinfo")
	os.WriteFile(mem, []byte("MemTotal:       24576000 kB\nMemFree: 1 kB\n"), 0o644)
	os.WriteFile(cpu, []byte("processor\t: 0\nmodel name\t: Fancy CPU @ 3GHz\nprocessor\t: 1\nmodel name\t: other\n"), 0o644)
	if got := memTotal(mem); got != 24576000*1024 {
		t.Errorf("memTotal = %d", got)
	}
	if got := cpuModel(cpu); got != "Fancy CPU @ 3GHz" {
		t.Errorf("cpuModel = %q", got)
	}
	if got, got2 := memTotal(filepath.Join(dir, "none")), cpuModel(filepath.Join(dir, "none")); got != 0 || got2 != "unknown" {
		t.Errorf("missing files: %d, %q; want 0, unknown", got, got2)
	}
	if got := commit("abc"); got != "abc" {
		t.Errorf("commit override = %q", got)
	}
	if got := commit(""); got == "" {
		t.Error("commit() is empty, want a revision or unknown")
	}
}
