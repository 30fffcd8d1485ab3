package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/testservers/minioserver"
)

// TestSpillMetrics runs the spilling limits and metrics in quick mode
// against a real MinIO started by the run: every figure is measured (not
// "not available"), the metrics are compared with the raw minio-go limits
// of the same run, and the MinIO server is gone afterwards.
func TestSpillMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MinIO and a node")
	}
	bin, err := minioserver.Binary()
	if err != nil {
		t.Fatal(err) // `make test` installs it; never skip for it
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	names := []string{LimitS3Upload, LimitS3Download, MetricSpillS3, MetricRestoreS3}
	filter := regexp.MustCompile("^(" + strings.Join(quoteAll(names), "|") + ")$")
	var log bytes.Buffer
	rep, err := Run(ctx, Options{Quick: true, Filter: filter, Runtime: testRuntime, Log: &log, Command: "go test"})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("\n%s", log.String())
	if len(rep.Limits) != 2 || len(rep.Metrics) != 2 {
		t.Fatalf("limits %+v metrics %+v, want the two S3 limits and the two spilling metrics", rep.Limits, rep.Metrics)
	}
	for _, r := range append(append([]Result{}, rep.Limits...), rep.Metrics...) {
		if r.Status != StatusOK || r.Mean <= 0 || r.Unit != UnitGBps {
			t.Errorf("%s: %+v, want status ok and a positive figure in GB/s", r.Name, r)
		}
	}
	for _, r := range rep.Metrics {
		t.Logf("%s: %s", r.Name, r.Note)
		if !strings.Contains(r.Note, "the node's counters") {
			t.Errorf("%s: the note lacks the node's own counters: %q", r.Name, r.Note)
		}
	}
	for metric, limit := range map[string]string{MetricSpillS3: LimitS3Upload, MetricRestoreS3: LimitS3Download} {
		r, l := find(rep.Metrics, metric), find(rep.Limits, limit)
		if r.LimitName != limit || l.Mean <= 0 || abs(r.Ratio-r.Mean/l.Mean) > 1e-9*r.Ratio {
			t.Errorf("%s: limit %q ratio %v, want the ratio to %s (%v)", metric, r.LimitName, r.Ratio, limit, l.Mean)
		}
	}
	if left := minioChildren(t, bin); len(left) > 0 {
		t.Errorf("MinIO servers of the run still running: pids %v", left)
	}
}

// TestSpillMetricsNotAvailable: without a MinIO binary the S3 limits and
// the spilling metrics say why they cannot run instead of failing.
func TestSpillMetricsNotAvailable(t *testing.T) {
	t.Setenv(minioserver.EnvBinary, filepath.Join(t.TempDir(), "no-minio"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Quick: true, Filter: regexp.MustCompile("^(" + LimitS3Upload + "|" + MetricSpillS3 + ")$"), Runtime: testRuntime})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, r := range append(append([]Result{}, rep.Limits...), rep.Metrics...) {
		if r.Status != StatusNotAvailable || !strings.Contains(r.Note, minioserver.EnvBinary) {
			t.Errorf("%s: status %q note %q, want not_available naming $%s", r.Name, r.Status, r.Note, minioserver.EnvBinary)
		}
	}
	if len(rep.Limits) != 1 || len(rep.Metrics) != 1 {
		t.Errorf("limits %+v metrics %+v, want one of each", rep.Limits, rep.Metrics)
	}
}

// minioChildren returns the pids of this process's children running the
// MinIO binary bin.
func minioChildren(t *testing.T, bin string) []int {
	t.Helper()
	want, err := filepath.EvalSymlinks(bin)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command name (which may hold spaces): state, ppid.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == want {
			out = append(out, pid)
		}
	}
	return out
}
