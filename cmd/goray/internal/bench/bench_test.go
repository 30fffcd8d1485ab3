package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
	"github.com/hashicorp/go-hclog"
)

// testRuntime is the embedded runtime every test and benchmark shares.
var testRuntime *ray.Runtime

func TestMain(m *testing.M) {
	MaybeServeTransport() // the node runs this binary as the shm transport plugin
	MaybeServePlugin()    // the go_plugin_round_trip limit re-executes this binary

	MaybeServeTransportPlugins() // the transport plugin metrics' nodes run this binary as their plugins
	MaybeServeStoragePlugin()    // the spilling metrics' node runs this binary as its s3 plugin
	if ray.IsWorker() {
		ray.Init(context.Background()) // serves tasks; never returns
	}
	cfg, cleanup, err := shmNodeConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "shm plugin config:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	rt, err := ray.Init(ctx, ray.WithLogger(hclog.NewNullLogger()), ray.WithConfig(cfg))
	cancel()
	if err != nil {
		cleanup()
		fmt.Fprintln(os.Stderr, "starting goray:", err)
		os.Exit(1)
	}
	testRuntime = rt
	code := m.Run()
	rt.Shutdown(context.Background())
	cleanup()
	os.Exit(code)
}

func TestQuickRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wantLimits := []string{LimitMemcpy, LimitGRPC, LimitGRPCStream, LimitPlugin}
	wantMetrics := []string{MetricGetCalls, MetricPutCalls, MetricTasksSync, MetricActorSync, MetricPlacementGroup, MetricTensorTransferShm}
	var quoted []string
	for _, n := range append(append([]string{}, wantLimits...), wantMetrics...) {
		quoted = append(quoted, regexp.QuoteMeta(n))
	}
	filter := regexp.MustCompile("^(" + strings.Join(quoted, "|") + ")$")
	var log bytes.Buffer
	rep, err := Run(ctx, Options{Quick: true, Filter: filter, Runtime: testRuntime, Log: &log, Command: "go test"})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if f := rep.Failed(); len(f) > 0 {
		t.Fatalf("failed metrics: %+v", f)
	}
	names := func(rs []Result) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Name)
		}
		return out
	}
	if got := names(rep.Limits); strings.Join(got, ",") != strings.Join(wantLimits, ",") {
		t.Fatalf("limits = %v, want %v", got, wantLimits)
	}
	if got := names(rep.Metrics); strings.Join(got, ",") != strings.Join(wantMetrics, ",") {
		t.Fatalf("metrics = %v, want %v", got, wantMetrics)
	}
	for _, r := range append(append([]Result{}, rep.Limits...), rep.Metrics...) {
		if r.Status != StatusOK || r.Mean <= 0 || r.SD < 0 || r.Unit == "" {
			t.Errorf("%s: %+v, want status ok, mean > 0, sd >= 0 and a unit", r.Name, r)
		}
	}
	for _, name := range []string{MetricTasksSync, MetricActorSync} {
		r := find(rep.Metrics, name)
		want := (1e6 / r.Mean) / find(rep.Limits, LimitGRPCStream).Mean
		if r.LimitName != LimitGRPCStream || r.Ratio <= 0 || abs(r.Ratio-want) > 1e-9*want {
			t.Errorf("%s: limit %q ratio %v, want %s and ratio %v", name, r.LimitName, r.Ratio, LimitGRPCStream, want)
		}
	}
	if r := find(rep.Metrics, MetricTensorTransferShm); r.LimitName != LimitMemcpy || r.Unit != UnitGBps ||
		abs(r.Ratio-r.Mean/find(rep.Limits, LimitMemcpy).Mean) > 1e-9*r.Ratio {
		t.Errorf("%s: %+v, want GB/s with a ratio to %s", r.Name, r, LimitMemcpy)
	}
	if lines := strings.Count(log.String(), "\n"); lines != len(wantLimits)+len(wantMetrics) {
		t.Errorf("progress log has %d lines, want %d:\n%s", lines, len(wantLimits)+len(wantMetrics), log.String())
	}

	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("report JSON: %v", err)
	}
	for _, k := range []string{"machine", "commit", "date", "command", "limits", "metrics"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("report JSON lacks %q", k)
		}
	}
	if c, _ := doc["commit"].(string); c == "" {
		t.Error("report JSON has an empty commit")
	}
	machine, _ := doc["machine"].(map[string]any)
	for _, k := range []string{"cores", "memory_bytes", "go_version", "os", "arch", "cpu_model"} {
		if _, ok := machine[k]; !ok {
			t.Errorf("machine JSON lacks %q", k)
		}
	}
	for _, section := range []string{"limits", "metrics"} {
		items, _ := doc[section].([]any)
		for _, it := range items {
			m, _ := it.(map[string]any)
			for _, k := range []string{"name", "mean", "sd", "unit", "status"} {
				if _, ok := m[k]; !ok {
					t.Errorf("%s entry %v lacks %q", section, m["name"], k)
				}
			}
		}
	}
}

func find(rs []Result, name string) Result {
	for _, r := range rs {
		if r.Name == name {
			return r
		}
	}
	return Result{}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestMetricNames checks the full metric list against Ray's names and
// multipliers (N_CPU/2 fixed at 3 here).
func TestMetricNames(t *testing.T) {
	e := &env{half: 3}
	want := []struct {
		name string
		mult float64
	}{
		{"single_client_get_calls_Plasma_Store", 1},
		{"single_client_put_calls_Plasma_Store", 1},
		{"multi_client_put_calls_Plasma_Store", 1000},
		{"single_client_put_gigabytes", 0.8},
		{"single_client_tasks_and_get_batch", 1},
		{"multi_client_put_gigabytes", 8},
		{"single_client_get_object_containing_10k_refs", 1},
		{"single_client_wait_1k_refs", 1},
		{"single_client_tasks_sync", 1},
		{"single_client_tasks_async", 1000},
		{"multi_client_tasks_async", 40000},
		{"1_1_actor_calls_sync", 1},
		{"1_1_actor_calls_async", 1000},
		{"1_1_actor_calls_concurrent", 1000},
		{"1_n_actor_calls_async", 15000},
		{"n_n_actor_calls_async", 20000},
		{"n_n_actor_calls_with_arg_async", 3000},
		{"1_1_async_actor_calls_sync", 1},
		{"1_1_async_actor_calls_async", 1000},
		{"1_1_async_actor_calls_with_args_async", 1000},
		{"1_n_async_actor_calls_async", 15000},
		{"n_n_async_actor_calls_async", 20000},
		{"placement_group_create/removal", 100},
		{"single_client_get_calls_store", 1},
		{"single_client_generator_items", 1000},
		{"single_client_put_calls_store", 1},
		{"tensor_transfer_shm_actor_to_actor", float64(64<<20) / 1e9},
		{"object_transfer_node_to_node", float64(256<<20) / 1e9},
		{"object_pull_node_to_node", float64(256<<20) / 1e9},
		{"allreduce_bus_bandwidth_2_ranks_1MiB", float64(1<<20) / 1e9},
		{"allreduce_bus_bandwidth_2_ranks_64MiB", float64(64<<20) / 1e9},
		{"allreduce_bus_bandwidth_2_ranks_256MiB", float64(256<<20) / 1e9},
		{"allreduce_bus_bandwidth_4_ranks_1MiB", 1.5 * float64(1<<20) / 1e9},
		{"allreduce_bus_bandwidth_4_ranks_64MiB", 1.5 * float64(64<<20) / 1e9},
		{"allreduce_bus_bandwidth_4_ranks_256MiB", 1.5 * float64(256<<20) / 1e9},
		{"onesided_read_within_node_64MiB", float64(64<<20) / 1e9},
		{"onesided_read_across_nodes_64MiB", float64(64<<20) / 1e9},
		{"onesided_register_64MiB", 0},
		{"onesided_register_64MiB_reused", 0},
		{"spill_to_s3", float64(32<<20) / 1e9},
		{"restore_from_s3", float64(32<<20) / 1e9},
	}
	got := e.metrics()
	if len(got) != len(want) {
		t.Fatalf("%d metrics, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].name != w.name || abs(got[i].mult-w.mult) > 1e-12 {
			t.Errorf("metric %d = %s ×%v, want %s ×%v", i, got[i].name, got[i].mult, w.name, w.mult)
		}
		if (got[i].setup == nil) == (got[i].unavailable == "") {
			t.Errorf("%s: want exactly one of a set-up or an unavailable reason", got[i].name)
		}
		// Beyond Ray's list, each metric says what Ray workload it is
		// nearest to.
		if i > 22 && !strings.Contains(got[i].note, "goray's own") {
			t.Errorf("%s: goray's own metric whose note does not say so, nor its nearest Ray workload: %q", got[i].name, got[i].note)
		}
	}
	quick := (&env{half: 3, quick: true}).metrics()
	if m := quick[3]; m.mult >= 0.8 || !strings.Contains(m.note, "quick mode") {
		t.Errorf("quick %s: multiplier %v note %q, want a smaller size said in the note", m.name, m.mult, m.note)
	}
	byName := func(ws []workload, name string) workload {
		for _, w := range ws {
			if w.name == name {
				return w
			}
		}
		t.Fatalf("no metric %s", name)
		return workload{}
	}
	tensor := byName(got, MetricTensorTransferShm)
	if tensor.transport != "shm" || tensor.limit != LimitMemcpy || tensor.ratio == nil {
		t.Errorf("%s: transport %q limit %q, want shm and %s with a ratio", tensor.name, tensor.transport, tensor.limit, LimitMemcpy)
	}
	if m := byName(quick, MetricTensorTransferShm); abs(m.mult-float64(8<<20)/1e9) > 1e-12 || !strings.Contains(m.note, "quick mode") {
		t.Errorf("quick %s: multiplier %v note %q, want 8 MiB said in the note", m.name, m.mult, m.note)
	}
	nodes := byName(got, MetricObjectTransferNodes)
	if nodes.transport != "" || nodes.limit != LimitTCP || nodes.ratio == nil {
		t.Errorf("%s: transport %q limit %q, want none and %s with a ratio", nodes.name, nodes.transport, nodes.limit, LimitTCP)
	}
	if m := byName(quick, MetricObjectTransferNodes); abs(m.mult-float64(32<<20)/1e9) > 1e-12 || !strings.Contains(m.note, "quick mode") {
		t.Errorf("quick %s: multiplier %v note %q, want 32 MiB said in the note", m.name, m.mult, m.note)
	}
	// The transport plugin metrics: bandwidths compared with the ring's and
	// the copies' limits, registrations as latencies.
	for _, c := range []struct {
		name, limit string
		latency     bool
	}{
		{allReduceMetricName(2, 1<<20), LimitTCP, false},
		{allReduceMetricName(4, 256<<20), LimitTCP, false},
		{MetricOneSidedReadNode, LimitMemcpy, false},
		{MetricOneSidedReadNodes, LimitTCP, false},
		{MetricOneSidedRegister, LimitMemcpy, true},
		{MetricOneSidedRegisterReused, LimitPlugin, true},
		{MetricSpillS3, LimitS3Upload, false},
		{MetricRestoreS3, LimitS3Download, false},
	} {
		m := byName(got, c.name)
		if m.limit != c.limit || m.ratio == nil || m.latency != c.latency || m.setup == nil {
			t.Errorf("%s: limit %q latency %v, want %s with a ratio, latency %v", m.name, m.limit, m.latency, c.limit, c.latency)
		}
	}
	// A register's ratio is its time over memcpy's for the same bytes.
	if r := byName(got, MetricOneSidedRegister).ratio(float64(64<<20)/1e4, 10); abs(r-1) > 1e-9 {
		t.Errorf("register ratio for 6.7 ms against 10 GB/s memcpy of 64 MiB = %v, want about 1", r)
	}
}

func TestRunnerStatuses(t *testing.T) {
	boom := fmt.Errorf("boom")
	ok := func(context.Context) error { return nil }
	tests := []struct {
		name      string
		w         workload
		status    string
		errSubstr string
		torn      bool
	}{
		{"ok", workload{mult: 2, setup: simple(ok)}, StatusOK, "", false},
		{"unavailable", workload{unavailable: "no"}, StatusNotAvailable, "", false},
		{"set-up not available", workload{setup: func(context.Context) (func(context.Context) error, func(context.Context), error) {
			return nil, nil, &notAvailableError{reason: "no toolchain"}
		}}, StatusNotAvailable, "", false},
		{"set-up fails", workload{setup: func(context.Context) (func(context.Context) error, func(context.Context), error) {
			return nil, nil, boom
		}}, StatusError, "set-up: boom", false},
		{"call fails", workload{}, StatusError, "boom", true},
		{"call panics", workload{}, StatusError, "panic: kaboom", true},
		{"call hangs", workload{}, StatusError, "hung", true},
		{"set-up hangs", workload{setup: func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
			<-ctx.Done()
			return nil, nil, ctx.Err()
		}}, StatusError, "set-up took longer than", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			torn := false
			switch tc.name {
			case "call fails", "call panics", "call hangs":
				tc.w.setup = func(context.Context) (func(context.Context) error, func(context.Context), error) {
					n := 0
					return func(ctx context.Context) error {
						if n++; n == 3 {
							switch tc.name {
							case "call panics":
								panic("kaboom")
							case "call hangs":
								<-ctx.Done()
								return ctx.Err()
							}
							return boom
						}
						return nil
					}, func(context.Context) { torn = true }, nil
				}
			}
			tc.w.name = tc.name
			r := runner{timing: fakeTiming(10 * time.Millisecond), timeout: time.Minute, stall: 200 * time.Millisecond}
			res := r.run(context.Background(), tc.w)
			if res.Status != tc.status || !strings.Contains(res.Error, tc.errSubstr) {
				t.Fatalf("status %q error %q, want %q containing %q", res.Status, res.Error, tc.status, tc.errSubstr)
			}
			if torn != tc.torn {
				t.Fatalf("teardown ran = %v, want %v", torn, tc.torn)
			}
			if tc.status == StatusNotAvailable && res.Note == "" {
				t.Fatal("not_available result without a note")
			}
		})
	}
}

func BenchmarkTaskSync(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		r := smallValueTask.Remote(ctx)
		if _, err := r.Get(ctx); err != nil {
			b.Fatal(err)
		}
		r.Release()
	}
}

func BenchmarkTasksAsync1000(b *testing.B) {
	ctx := context.Background()
	fn := callsBatch(1000, func(ctx context.Context, _ int) ray.Ref[[]byte] { return smallValueTask.Remote(ctx) })
	for b.Loop() {
		if err := fn(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "tasks/s")
}

// BenchmarkActorCallSync is 1_1_actor_calls_sync: one call at a time,
// each waited for.
func BenchmarkActorCallSync(b *testing.B) {
	ctx := context.Background()
	as, err := newActors(ctx, 1, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer killAll(ctx, as)
	for b.Loop() {
		r := actorSmallValue.On(as[0]).Remote(ctx)
		if _, err := r.Get(ctx); err != nil {
			b.Fatal(err)
		}
		r.Release()
	}
}

func BenchmarkActorCallAsync(b *testing.B) {
	ctx := context.Background()
	as, err := newActors(ctx, 1, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer killAll(ctx, as)
	fn := callsBatch(1000, func(ctx context.Context, _ int) ray.Ref[[]byte] { return actorSmallValue.On(as[0]).Remote(ctx) })
	for b.Loop() {
		if err := fn(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "calls/s")
}

func BenchmarkPutGetSmall(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		r, err := ray.Put(ctx, 0)
		if err != nil {
			b.Fatal(err)
		}
		if v, err := r.Get(ctx); err != nil || v != 0 {
			b.Fatalf("Get = %v, %v", v, err)
		}
		r.Release()
	}
}
