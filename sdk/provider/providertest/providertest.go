package providertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/provider"
)

// Factory returns the provider under test for one subtest. It is called
// once per subtest with that subtest's t and registers its own cleanup
// with t.Cleanup. It may return the same provider every time: every
// subtest uses clusters of its own and terminates what it launched.
type Factory func(t *testing.T) provider.Provider

// Options tune the suite. Zero fields take their defaults; new settings
// are new fields, so callers keep compiling.
type Options struct {
	// NodeType is the node type the suite launches (default
	// "providertest").
	NodeType string
	// NodeConfig is the node_config of its launches (default none: {}).
	NodeConfig []byte
	// Node is what its instances run: for a provider whose instances join
	// a real cluster, the head's address and the cluster's token. The suite
	// adds provider.LabelClusterName and provider.LabelNodeType to Labels,
	// and a random token when AuthToken is empty. The token must never
	// show in an error or a LaunchError: the suite checks.
	Node provider.NodeSpec
	// FailingLaunch, if set, turns a launch request into one the provider
	// accepts and then fails (a node_config asking for failure, a binary
	// that exits at once): the "PollErrors" subtest checks that the failure
	// is reported once. Without it that subtest does not run.
	FailingLaunch func(req *provider.LaunchRequest)
	// Restart, if set, returns a new instance of the provider p (made by
	// the Factory for t) over the same state, as after a restart of the
	// plugin: the "Restart" subtest checks that it lists the instances
	// launched before and does not launch a request id again. Without it
	// that subtest does not run.
	Restart func(t *testing.T, p provider.Provider) provider.Provider
	// Timeout bounds every call of the suite (default 1 minute), so a
	// hanging provider fails instead of wedging the test binary.
	Timeout time.Duration
	// SettleTimeout is how long launched instances may take to show in
	// List and reach provider.StateRunning, terminated ones to leave it,
	// and a failed launch to show in PollErrors (default 2 minutes).
	SettleTimeout time.Duration
	// Concurrency is how many launches the "Concurrent" subtest sends at
	// once, each twice (default 4).
	Concurrency int
}

func (o Options) withDefaults() Options {
	if o.NodeType == "" {
		o.NodeType = "providertest"
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	if o.SettleTimeout <= 0 {
		o.SettleTimeout = 2 * time.Minute
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.Node.AuthToken == "" {
		o.Node.AuthToken = "providertest-token-" + randHex(16)
	}
	return o
}

// Run runs the conformance suite against the provider made by f, tuned by
// o (Options{} for the defaults).
func Run(t *testing.T, f Factory, o Options) {
	o = o.withDefaults()
	run := randHex(4)
	tests := []struct {
		name string
		fn   func(*env)
	}{
		{"NodeConfigSchema", testNodeConfigSchema},
		{"Launch", testLaunch},
		{"Idempotent", testIdempotent},
		{"Terminate", testTerminate},
		{"TerminateUnknown", testTerminateUnknown},
		{"Clusters", testClusters},
		{"PollErrors", testPollErrors},
		{"BadRequests", testBadRequests},
		{"Context", testContext},
		{"Concurrent", testConcurrent},
		{"Restart", testRestart},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.name == "PollErrors" && o.FailingLaunch == nil:
				t.Log("no Options.FailingLaunch given: the PollErrors checks do not run")
				return
			case tc.name == "Restart" && o.Restart == nil:
				t.Log("no Options.Restart given: the restart checks do not run")
				return
			}
			p := f(t)
			if p == nil {
				t.Fatal("factory returned a nil provider")
			}
			e := &env{t: t, topT: t, p: p, o: o, prefix: "pt" + run + "-" + strings.ToLower(tc.name), clusters: &clusterSet{}}
			t.Cleanup(e.cleanup)
			tc.fn(e)
		})
	}
}

// env is one subtest's world.
type env struct {
	t        *testing.T
	topT     *testing.T // the t the factory got (for Restart)
	p        provider.Provider
	o        Options
	prefix   string
	clusters *clusterSet
}

// clusterSet is the clusters a subtest used, with the provider to clean
// each up with.
type clusterSet struct {
	mu    sync.Mutex
	names []string
	p     map[string]provider.Provider
	n     int
}

// with returns the env for a nested subtest.
func (e *env) with(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

// withProvider returns the env with p (a restarted provider, made after
// the subtest's cleanup was registered) in place of the factory's; the
// subtest's clusters are cleaned up through p, before p's own cleanup
// tears it down.
func (e *env) withProvider(p provider.Provider) *env {
	c := *e
	c.p = p
	e.clusters.mu.Lock()
	for _, n := range e.clusters.names {
		e.clusters.p[n] = p
	}
	e.clusters.mu.Unlock()
	e.topT.Cleanup(c.cleanup)
	return &c
}

func (e *env) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), e.o.Timeout)
}

// cluster returns a fresh cluster name, whose instances are terminated
// when the subtest ends.
func (e *env) cluster() string {
	s := e.clusters
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	name := fmt.Sprintf("%s-%d", e.prefix, s.n)
	s.names = append(s.names, name)
	if s.p == nil {
		s.p = map[string]provider.Provider{}
	}
	s.p[name] = e.p
	return name
}

// requestID returns a fresh launch request id.
func (e *env) requestID(what string) string { return "ptreq-" + what + "-" + randHex(6) }

// launchRequest returns a request for count instances of the suite's node
// type in cluster.
func (e *env) launchRequest(cluster, id string, count int) *provider.LaunchRequest {
	node := e.o.Node
	node.Labels = maps.Clone(node.Labels)
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels[provider.LabelClusterName] = cluster
	node.Labels[provider.LabelNodeType] = e.o.NodeType
	node.Resources = maps.Clone(node.Resources)
	node.SetupCommands = slices.Clone(node.SetupCommands)
	return &provider.LaunchRequest{RequestID: id, ClusterName: cluster, NodeType: e.o.NodeType, Count: count,
		NodeConfig: slices.Clone(e.o.NodeConfig), Node: node}
}

// launch sends req and fails the test on an error.
func (e *env) launch(req *provider.LaunchRequest) {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	_, err := e.p.Launch(ctx, req)
	e.noToken("Launch", err)
	if err != nil {
		e.t.Fatalf("Launch %d of %q in cluster %q (request %q): %v", req.Count, req.NodeType, req.ClusterName, req.RequestID, err)
	}
}

// terminate sends a Terminate and fails the test on an error.
func (e *env) terminate(cluster string, ids ...string) {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	_, err := e.p.Terminate(ctx, &provider.TerminateRequest{RequestID: e.requestID("terminate"), ClusterName: cluster, InstanceIDs: ids})
	e.noToken("Terminate", err)
	if err != nil {
		e.t.Fatalf("Terminate %v in cluster %q: %v", ids, cluster, err)
	}
}

// list returns the cluster's instances, failing the test on an error or
// an instance that breaks the rules (no id, a duplicate id, an unknown
// state).
func (e *env) list(cluster string) []provider.Instance {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	r, err := e.p.List(ctx, &provider.ListRequest{ClusterName: cluster})
	e.noToken("List", err)
	if err != nil {
		e.t.Fatalf("List of cluster %q: %v", cluster, err)
	}
	if r == nil {
		e.t.Fatalf("List of cluster %q returned a nil response", cluster)
	}
	seen := map[string]bool{}
	for _, in := range r.Instances {
		if in.ID == "" {
			e.t.Errorf("List of cluster %q: an instance has no id: %+v", cluster, in)
		}
		if seen[in.ID] {
			e.t.Errorf("List of cluster %q: instance %q is listed twice", cluster, in.ID)
		}
		seen[in.ID] = true
		if !in.State.Valid() {
			e.t.Errorf("List of cluster %q: instance %q has state %q; want pending, running or terminating", cluster, in.ID, in.State)
		}
	}
	return r.Instances
}

// pollErrors returns the cluster's new errors, failing the test on an
// error or a LaunchError that shows the token.
func (e *env) pollErrors(cluster string) []provider.LaunchError {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	r, err := e.p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: cluster})
	e.noToken("PollErrors", err)
	if err != nil {
		e.t.Fatalf("PollErrors of cluster %q: %v", cluster, err)
	}
	if r == nil {
		e.t.Fatalf("PollErrors of cluster %q returned a nil response", cluster)
	}
	for _, le := range r.Errors {
		if strings.Contains(le.Message, e.o.Node.AuthToken) {
			e.t.Errorf("PollErrors of cluster %q: a LaunchError shows the cluster token: %q", cluster, le.Message)
		}
	}
	return r.Errors
}

// noToken fails the test if err's message shows the cluster token.
func (e *env) noToken(what string, err error) {
	e.t.Helper()
	if err != nil && strings.Contains(err.Error(), e.o.Node.AuthToken) {
		e.t.Errorf("%s: the error shows the cluster token: %q", what, err)
	}
}

// ofRequest returns the instances of request id.
func ofRequest(ins []provider.Instance, id string) []provider.Instance {
	var out []provider.Instance
	for _, in := range ins {
		if in.RequestID == id {
			out = append(out, in)
		}
	}
	return out
}

// ids returns the instances' ids, sorted.
func ids(ins []provider.Instance) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.ID
	}
	slices.Sort(out)
	return out
}

// pollInterval is how often the suite lists while it waits for the
// provider: a polling interval, not synchronisation.
const pollInterval = 50 * time.Millisecond

// waitList lists cluster until cond holds, and fails the test (saying
// what it waited for and what it last saw) if it does not within
// Options.SettleTimeout. check, if set, runs on every listing (to catch
// what must never be seen).
func (e *env) waitList(cluster, what string, cond func([]provider.Instance) bool) []provider.Instance {
	e.t.Helper()
	deadline := time.Now().Add(e.o.SettleTimeout)
	for {
		ins := e.list(cluster)
		if cond(ins) {
			return ins
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("cluster %q: still not %s after %v; List shows %s", cluster, what, e.o.SettleTimeout, show(ins))
		}
		time.Sleep(pollInterval)
	}
}

// allRunning reports whether every instance is running.
func allRunning(ins []provider.Instance) bool {
	for _, in := range ins {
		if in.State != provider.StateRunning {
			return false
		}
	}
	return true
}

// show formats instances for messages.
func show(ins []provider.Instance) string {
	if len(ins) == 0 {
		return "no instances"
	}
	parts := make([]string, len(ins))
	for i, in := range ins {
		parts[i] = fmt.Sprintf("%s (%s, request %s, type %s)", in.ID, in.State, in.RequestID, in.NodeType)
	}
	return strings.Join(parts, ", ")
}

// cleanup terminates every instance of the subtest's clusters and waits
// until they are gone. A second call does nothing.
func (e *env) cleanup() {
	e.clusters.mu.Lock()
	names := e.clusters.names
	e.clusters.names = nil
	ps := maps.Clone(e.clusters.p)
	e.clusters.mu.Unlock()
	deadline := time.Now().Add(e.o.SettleTimeout)
	for _, name := range names {
		p := ps[name]
		for {
			ctx, cancel := e.ctx()
			r, err := p.List(ctx, &provider.ListRequest{ClusterName: name})
			if err == nil && len(r.Instances) > 0 {
				_, err = p.Terminate(ctx, &provider.TerminateRequest{ClusterName: name, InstanceIDs: ids(r.Instances)})
			}
			cancel()
			if err != nil {
				e.t.Errorf("cleanup of cluster %q: %v", name, err)
				break
			}
			if len(r.Instances) == 0 {
				break
			}
			if time.Now().After(deadline) {
				e.t.Errorf("cleanup of cluster %q: instances still listed after %v: %s", name, e.o.SettleTimeout, show(r.Instances))
				break
			}
			time.Sleep(pollInterval)
		}
		ctx, cancel := e.ctx()
		_, _ = p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: name})
		cancel()
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// wantErr checks that err matches target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: got no error, want one matching %v", what, target)
		return
	}
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %q, want one matching %v", what, err, target)
	}
}

// promptly bounds how long a call may take to return once its context
// has ended.
const promptly = 5 * time.Second
