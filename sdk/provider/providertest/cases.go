package providertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/plugin/plugintest"
	"github.com/goray-dev/goray/sdk/provider"
)

func testNodeConfigSchema(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	r, err := e.p.NodeConfigSchema(ctx, &provider.NodeConfigSchemaRequest{})
	if err != nil {
		e.t.Fatalf("NodeConfigSchema: %v", err)
	}
	if r == nil {
		e.t.Fatal("NodeConfigSchema returned a nil response")
	}
	if err := r.Schema.Validate(); err != nil {
		e.t.Errorf("NodeConfigSchema: %v", err)
	}
	r2, err := e.p.NodeConfigSchema(ctx, nil)
	if err != nil {
		e.t.Fatalf("NodeConfigSchema(nil): %v", err)
	}
	if r2 == nil || !reflect.DeepEqual(r.Schema, r2.Schema) {
		e.t.Errorf("NodeConfigSchema changed between calls: %+v then %+v", r, r2)
	}
}

func testLaunch(e *env) {
	c, id := e.cluster(), e.requestID("launch")
	start := time.Now()
	e.launch(e.launchRequest(c, id, 2))
	// Accepted means recorded: List shows the instances at once (pending
	// or running), so that an autoscaler restarted right after Launch
	// returned sees them and does not launch again.
	{
		ctx, cancel := e.ctx()
		r, err := e.p.List(ctx, &provider.ListRequest{ClusterName: c})
		cancel()
		if err != nil {
			e.t.Fatalf("List right after Launch: %v", err)
		}
		if n := len(ofRequest(r.Instances, id)); n != 2 {
			e.t.Fatalf("List right after Launch returned shows %d instances of the request; want 2 (pending or running): %s", n, show(r.Instances))
		}
	}
	ins := e.waitList(c, "showing the 2 instances of the launch, running", func(ins []provider.Instance) bool {
		if len(ins) > 2 {
			e.t.Fatalf("a launch of 2 instances shows %d: %s", len(ins), show(ins))
		}
		return len(ofRequest(ins, id)) == 2 && allRunning(ins)
	})
	for _, in := range ins {
		if in.NodeType != e.o.NodeType {
			e.t.Errorf("instance %q has node type %q; want %q", in.ID, in.NodeType, e.o.NodeType)
		}
		if in.Address == "" {
			e.t.Errorf("running instance %q has no address", in.ID)
		}
		if in.LaunchedAt.Before(start.Add(-time.Minute)) || in.LaunchedAt.After(time.Now().Add(time.Minute)) {
			e.t.Errorf("instance %q was launched at %v; want about %v", in.ID, in.LaunchedAt, start)
		}
	}
}

func testIdempotent(e *env) {
	c, id := e.cluster(), e.requestID("idem")
	e.launch(e.launchRequest(c, id, 2))
	e.launch(e.launchRequest(c, id, 2))
	e.launch(e.launchRequest(c, id, 3)) // the id decides, not the rest of the request
	// A later request shows that the provider has handled the earlier ones.
	marker := e.requestID("marker")
	e.launch(e.launchRequest(c, marker, 1))
	ins := e.waitList(c, "showing the request's instances and the next request's, running", func(ins []provider.Instance) bool {
		return len(ofRequest(ins, id)) >= 2 && len(ofRequest(ins, marker)) == 1 && allRunning(ins)
	})
	mine := ofRequest(ins, id)
	if len(mine) != 2 {
		e.t.Fatalf("request %q sent 3 times (count 2, 2, 3) launched %d instances; want 2: %s", id, len(mine), show(ins))
	}

	// Once its instances are terminated, the request id still launches
	// nothing.
	e.terminate(c, ids(mine)...)
	e.waitList(c, "without the terminated instances", func(ins []provider.Instance) bool { return len(ofRequest(ins, id)) == 0 })
	e.launch(e.launchRequest(c, id, 2))
	marker = e.requestID("marker")
	e.launch(e.launchRequest(c, marker, 1))
	ins = e.waitList(c, "showing the next request's instance, running", func(ins []provider.Instance) bool {
		m := ofRequest(ins, marker)
		return len(m) == 1 && allRunning(m)
	})
	if again := ofRequest(ins, id); len(again) > 0 {
		e.t.Errorf("request %q, sent again after its instances were terminated, launched %d instances; want none: %s", id, len(again), show(again))
	}
}

func testTerminate(e *env) {
	c, id := e.cluster(), e.requestID("term")
	e.launch(e.launchRequest(c, id, 2))
	ins := e.waitList(c, "showing the 2 instances of the launch, running", func(ins []provider.Instance) bool {
		return len(ofRequest(ins, id)) == 2 && allRunning(ins)
	})
	gone, kept := ins[0].ID, ins[1].ID
	e.terminate(c, gone)
	e.waitList(c, fmt.Sprintf("without terminated instance %q", gone), func(ins []provider.Instance) bool {
		found := false
		for _, in := range ins {
			switch in.ID {
			case gone: // Terminate is asynchronous: it may still show
				found = true
			case kept:
				if in.State != provider.StateRunning {
					e.t.Fatalf("instance %q, which was not terminated, is %s", kept, in.State)
				}
			}
		}
		return !found
	})
	if now := e.list(c); !slices.Equal(ids(now), []string{kept}) {
		e.t.Errorf("after terminating %q of %q and %q, List shows %s; want only %q", gone, gone, kept, show(now), kept)
	}
	// Terminate is idempotent: the gone instance again, a duplicate id.
	e.terminate(c, gone)
	e.terminate(c, kept, kept)
	e.waitList(c, "empty once every instance was terminated", func(ins []provider.Instance) bool { return len(ins) == 0 })
	if now := e.list(c); len(now) != 0 {
		e.t.Errorf("terminated instances came back: %s", show(now))
	}
}

func testTerminateUnknown(e *env) {
	c := e.cluster()
	e.terminate(c, "providertest-no-such-instance-"+randHex(4))
	e.terminate(c)
	if ins := e.list(c); len(ins) != 0 {
		e.t.Errorf("a fresh cluster lists %s", show(ins))
	}
}

func testClusters(e *env) {
	a, b := e.cluster(), e.cluster()
	id := e.requestID("clusters")
	e.launch(e.launchRequest(a, id, 1))
	ins := e.waitList(a, "showing the instance of the launch, running", func(ins []provider.Instance) bool {
		return len(ofRequest(ins, id)) == 1 && allRunning(ins)
	})
	if other := e.list(b); len(other) != 0 {
		e.t.Errorf("cluster %q lists instances of cluster %q: %s", b, a, show(other))
	}
	// Terminate names a cluster: an instance of another is not stopped.
	e.terminate(b, ins[0].ID)
	marker := e.requestID("marker")
	e.launch(e.launchRequest(b, marker, 1))
	inB := e.waitList(b, "showing its own instance, running", func(ins []provider.Instance) bool {
		m := ofRequest(ins, marker)
		return len(m) == 1 && allRunning(m)
	})
	if len(inB) != 1 {
		e.t.Errorf("cluster %q lists %s; want only its own instance", b, show(inB))
	}
	after := e.list(a)
	if len(after) != 1 || after[0].ID != ins[0].ID || after[0].State != provider.StateRunning {
		e.t.Errorf("Terminate in cluster %q of instance %q of cluster %q: cluster %q now lists %s; want it still running",
			b, ins[0].ID, a, a, show(after))
	}
}

func testPollErrors(e *env) {
	c, other := e.cluster(), e.cluster()
	id := e.requestID("fail")
	req := e.launchRequest(c, id, 1)
	e.o.FailingLaunch(req)
	e.launch(req)
	deadline := time.Now().Add(e.o.SettleTimeout)
	var got []provider.LaunchError
	for len(got) == 0 {
		for _, le := range e.pollErrors(c) {
			if le.RequestID == id {
				got = append(got, le)
			}
		}
		for _, le := range e.pollErrors(other) {
			if le.RequestID == id {
				e.t.Errorf("PollErrors of cluster %q reports the failure of cluster %q: %+v", other, c, le)
			}
		}
		if len(got) > 0 {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the failed launch of request %q never showed in PollErrors (waited %v)", id, e.o.SettleTimeout)
		}
		time.Sleep(pollInterval)
	}
	le := got[0]
	if len(got) > 1 {
		e.t.Errorf("PollErrors reported the failure of request %q %d times at once: %+v", id, len(got), got)
	}
	if le.Op != provider.ErrorOpLaunch {
		e.t.Errorf("the launch error has Op %q; want %q", le.Op, provider.ErrorOpLaunch)
	}
	if le.NodeType != e.o.NodeType {
		e.t.Errorf("the launch error has node type %q; want %q", le.NodeType, e.o.NodeType)
	}
	if le.Message == "" {
		e.t.Error("the launch error has no message")
	}
	if le.At.IsZero() {
		e.t.Error("the launch error has no time")
	}
	// Each error once.
	for range 3 {
		for _, again := range e.pollErrors(c) {
			if again.RequestID == id {
				e.t.Errorf("PollErrors reported the failure of request %q again: %+v", id, again)
			}
		}
		time.Sleep(pollInterval)
	}
}

// badLaunch is a launch request that breaks a rule.
type badLaunch struct {
	name   string
	mutate func(r *provider.LaunchRequest)
}

func testBadRequests(e *env) {
	c := e.cluster()
	unknownSetting, err := withSetting(e.o.NodeConfig, "providertest_no_such_setting", true)
	if err != nil {
		e.t.Fatalf("Options.NodeConfig: %v", err)
	}
	launches := []badLaunch{
		{"no request id", func(r *provider.LaunchRequest) { r.RequestID = "" }},
		{"no cluster name", func(r *provider.LaunchRequest) { r.ClusterName = "" }},
		{"no node type", func(r *provider.LaunchRequest) { r.NodeType = "" }},
		{"count 0", func(r *provider.LaunchRequest) { r.Count = 0 }},
		{"count -1", func(r *provider.LaunchRequest) { r.Count = -1 }},
		{"node_config not JSON", func(r *provider.LaunchRequest) { r.NodeConfig = []byte("node_config") }},
		{"node_config an array", func(r *provider.LaunchRequest) { r.NodeConfig = []byte(`[1, 2]`) }},
		{"node_config with an unknown setting", func(r *provider.LaunchRequest) { r.NodeConfig = unknownSetting }},
	}
	ctx, cancel := e.ctx()
	defer cancel()
	for _, bl := range launches {
		req := e.launchRequest(c, e.requestID("bad"), 1)
		bl.mutate(req)
		_, err := e.p.Launch(ctx, req)
		e.noToken("Launch", err)
		wantErr(e.t, "Launch with "+bl.name, err, provider.ErrInvalidRequest)
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"Launch(nil)", func() error { _, err := e.p.Launch(ctx, nil); return err }},
		{"Terminate(nil)", func() error { _, err := e.p.Terminate(ctx, nil); return err }},
		{"Terminate without a cluster name", func() error {
			_, err := e.p.Terminate(ctx, &provider.TerminateRequest{InstanceIDs: []string{"x"}})
			return err
		}},
		{"Terminate of an empty instance id", func() error {
			_, err := e.p.Terminate(ctx, &provider.TerminateRequest{ClusterName: c, InstanceIDs: []string{""}})
			return err
		}},
		{"List(nil)", func() error { _, err := e.p.List(ctx, nil); return err }},
		{"List without a cluster name", func() error { _, err := e.p.List(ctx, &provider.ListRequest{}); return err }},
		{"PollErrors(nil)", func() error { _, err := e.p.PollErrors(ctx, nil); return err }},
		{"PollErrors without a cluster name", func() error {
			_, err := e.p.PollErrors(ctx, &provider.PollErrorsRequest{})
			return err
		}},
	}
	for _, call := range calls {
		err := call.call()
		e.noToken(call.name, err)
		wantErr(e.t, call.name, err, provider.ErrInvalidRequest)
	}
	// Nothing was launched: a good request after them is all there is.
	marker := e.requestID("marker")
	e.launch(e.launchRequest(c, marker, 1))
	ins := e.waitList(c, "showing the good request's instance", func(ins []provider.Instance) bool {
		return len(ofRequest(ins, marker)) == 1
	})
	if len(ins) != 1 {
		e.t.Errorf("refused launches started instances: %s", show(ins))
	}
}

// withSetting returns the JSON object nodeConfig with key set to v.
func withSetting(nodeConfig []byte, key string, v any) ([]byte, error) {
	m := map[string]any{}
	if len(bytes.TrimSpace(nodeConfig)) > 0 {
		if err := json.Unmarshal(nodeConfig, &m); err != nil {
			return nil, fmt.Errorf("node_config is not a JSON object: %v", err)
		}
	}
	m[key] = v
	return json.Marshal(m)
}

func testContext(e *env) {
	c := e.cluster()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"cancelled", cancelled, context.Canceled},
		{"expired", expired, context.DeadlineExceeded},
	} {
		e.t.Run(tc.name, func(t *testing.T) {
			e := e.with(t)
			ctx := tc.ctx
			calls := []struct {
				name string
				call func() error
			}{
				{"NodeConfigSchema", func() error { _, err := e.p.NodeConfigSchema(ctx, &provider.NodeConfigSchemaRequest{}); return err }},
				{"Launch", func() error {
					_, err := e.p.Launch(ctx, e.launchRequest(c, e.requestID("ctx"), 1))
					return err
				}},
				{"Terminate", func() error {
					_, err := e.p.Terminate(ctx, &provider.TerminateRequest{ClusterName: c, InstanceIDs: []string{"x"}})
					return err
				}},
				{"List", func() error { _, err := e.p.List(ctx, &provider.ListRequest{ClusterName: c}); return err }},
				{"PollErrors", func() error { _, err := e.p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: c}); return err }},
			}
			for _, call := range calls {
				what := fmt.Sprintf("%s with a %s context", call.name, tc.name)
				err := plugintest.Within(t, promptly, what, call.call)
				e.noToken(call.name, err)
				wantErr(t, what, err, tc.want)
			}
		})
	}
}

func testConcurrent(e *env) {
	c := e.cluster()
	n := e.o.Concurrency
	reqs := make([]string, n)
	for i := range reqs {
		reqs[i] = e.requestID(fmt.Sprintf("conc%d", i))
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	record := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	for _, id := range reqs {
		for range 2 { // each request twice at once
			wg.Go(func() {
				ctx, cancel := e.ctx()
				defer cancel()
				_, err := e.p.Launch(ctx, e.launchRequest(c, id, 1))
				record(err)
			})
		}
		wg.Go(func() {
			ctx, cancel := e.ctx()
			defer cancel()
			_, err := e.p.List(ctx, &provider.ListRequest{ClusterName: c})
			record(err)
		})
	}
	wg.Wait()
	for _, err := range errs {
		e.noToken("a concurrent call", err)
		e.t.Errorf("a concurrent call: %v", err)
	}
	ins := e.waitList(c, fmt.Sprintf("showing an instance of each of the %d requests, running", n), func(ins []provider.Instance) bool {
		for _, id := range reqs {
			if len(ofRequest(ins, id)) == 0 {
				return false
			}
		}
		return allRunning(ins)
	})
	for _, id := range reqs {
		if got := len(ofRequest(ins, id)); got != 1 {
			e.t.Errorf("request %q, sent twice at once, launched %d instances; want 1", id, got)
		}
	}
	if len(ins) != n {
		e.t.Errorf("%d requests of 1 instance each launched %d: %s", n, len(ins), show(ins))
	}
}

func testRestart(e *env) {
	c, id := e.cluster(), e.requestID("restart")
	e.launch(e.launchRequest(c, id, 2))
	before := e.waitList(c, "showing the 2 instances of the launch, running", func(ins []provider.Instance) bool {
		return len(ofRequest(ins, id)) == 2 && allRunning(ins)
	})
	p := e.o.Restart(e.topT, e.p)
	if p == nil {
		e.t.Fatal("Options.Restart returned a nil provider")
	}
	e = e.withProvider(p)
	after := e.list(c)
	if !slices.Equal(ids(after), ids(before)) {
		e.t.Fatalf("after a restart List shows %s; want the instances launched before: %s", show(after), show(before))
	}
	for _, in := range after {
		if in.RequestID != id || in.NodeType != e.o.NodeType {
			e.t.Errorf("after a restart instance %q has request %q and node type %q; want %q and %q", in.ID, in.RequestID, in.NodeType, id, e.o.NodeType)
		}
	}
	// The restarted provider still knows the request.
	e.launch(e.launchRequest(c, id, 2))
	marker := e.requestID("marker")
	e.launch(e.launchRequest(c, marker, 1))
	ins := e.waitList(c, "showing the next request's instance, running", func(ins []provider.Instance) bool {
		m := ofRequest(ins, marker)
		return len(m) == 1 && allRunning(m)
	})
	if mine := ofRequest(ins, id); len(mine) != 2 {
		e.t.Errorf("request %q, sent again after a restart, leaves %d instances; want the 2 launched before: %s", id, len(mine), show(ins))
	}
	e.terminate(c, ids(ins)...)
	e.waitList(c, "empty once the restarted provider terminated every instance", func(ins []provider.Instance) bool { return len(ins) == 0 })
}
