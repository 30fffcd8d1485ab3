package bench

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// TestTransportPluginMetrics runs the quickest of the transport plugin
// metrics (each starts a node in this process whose plugins are this test
// binary): a 2-rank 1 MiB all-reduce, a one-sided read within a node and
// across nodes, and a registration. They must be measured (not "not
// available"), compared with their limits, and leave no segment behind.
func TestTransportPluginMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before, _ := shmem.List(shmem.Prefix)
	want := []string{allReduceMetricName(2, 1<<20), MetricOneSidedReadNode, MetricOneSidedReadNodes, MetricOneSidedRegister}
	filter := regexp.MustCompile("^(" + LimitMemcpy + "|" + LimitTCP + "|" + strings.Join(quoteAll(want), "|") + ")$")
	var log bytes.Buffer
	rep, err := Run(ctx, Options{Quick: true, Filter: filter, Runtime: testRuntime, Log: &log, Command: "go test"})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("\n%s", log.String())
	if len(rep.Metrics) != len(want) {
		t.Fatalf("metrics %+v, want %v", rep.Metrics, want)
	}
	for _, r := range rep.Metrics {
		if r.Status != StatusOK || r.Mean <= 0 {
			t.Errorf("%s: %+v, want status ok and a positive figure", r.Name, r)
			continue
		}
		if r.LimitName == "" || r.Ratio <= 0 {
			t.Errorf("%s: limit %q ratio %v, want a ratio to its limit", r.Name, r.LimitName, r.Ratio)
		}
	}
	if r := find(rep.Metrics, MetricOneSidedRegister); r.Unit != UnitMicros || r.LimitName != LimitMemcpy {
		t.Errorf("%s: %+v, want µs compared with memcpy", r.Name, r)
	}
	if r := find(rep.Metrics, allReduceMetricName(2, 1<<20)); r.LimitName != LimitTCP || r.Unit != UnitGBps {
		t.Errorf("%s: %+v, want GB/s compared with TCP loopback", r.Name, r)
	}
	// Every segment of the metrics' actors and plugins is gone.
	deadline := time.Now().Add(10 * time.Second)
	for {
		after, _ := shmem.List(shmem.Prefix)
		var added []string
		for _, n := range after {
			if !contains(before, n) && !strings.HasPrefix(n, "goray-t-tt-") {
				added = append(added, n)
			}
		}
		if len(added) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("segments left behind: %v", added)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTransportPluginMetricsNotAvailable: without the busybox hook the
// metrics say why they cannot run instead of failing.
func TestTransportPluginMetricsNotAvailable(t *testing.T) {
	transportPluginsHook.Store(false)
	defer transportPluginsHook.Store(true)
	_, err := startTransportNode(context.Background(), pluginBlock{name: "collective"})
	var na *notAvailableError
	if !errors.As(err, &na) || !strings.Contains(na.reason, "MaybeServeTransportPlugins") {
		t.Fatalf("startTransportNode without the hook: %v", err)
	}
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = regexp.QuoteMeta(s)
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
