package providertest_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/internal/memprovider"
	"github.com/goray-dev/goray/sdk/provider/providertest"
)

// memOptions are the suite's options for the memory provider: failures
// through its node_config, restarts over its state.
func memOptions(restart func(t *testing.T, p provider.Provider) provider.Provider) providertest.Options {
	return providertest.Options{
		FailingLaunch: func(r *provider.LaunchRequest) { r.NodeConfig = []byte(`{"fail": true}`) },
		Restart:       restart,
	}
}

func TestMemory(t *testing.T) {
	providertest.Run(t, func(t *testing.T) provider.Provider { return memprovider.New() },
		memOptions(func(_ *testing.T, p provider.Provider) provider.Provider { return p.(*memprovider.Provider).Restart() }))
}

// TestMemoryOverGRPC runs the suite through the gRPC bridge; a restart is
// a new server over the same state.
func TestMemoryOverGRPC(t *testing.T) {
	var mu sync.Mutex
	mems := map[provider.Provider]*memprovider.Provider{}
	serve := func(t *testing.T, m *memprovider.Provider) provider.Provider {
		c := providertest.OverGRPC(t, m)
		mu.Lock()
		mems[c] = m
		mu.Unlock()
		return c
	}
	providertest.Run(t, func(t *testing.T) provider.Provider { return serve(t, memprovider.New()) },
		memOptions(func(t *testing.T, p provider.Provider) provider.Provider {
			mu.Lock()
			m := mems[p]
			mu.Unlock()
			return serve(t, m.Restart())
		}))
}

// ---------------------------------------------------------------- buggy providers

// A bug is a broken variant of the memory provider, the suite's subtest
// that must catch it, and a piece of the failure message it must print.
type bug struct {
	wrap func(*memprovider.Provider) provider.Provider
	run  string // -test.run pattern below TestBuggyChild
	want string
}

var bugs = map[string]bug{
	// Launches again for a request id it has seen.
	"launch-not-idempotent": {wrap: func(m *memprovider.Provider) provider.Provider { return &notIdempotent{Provider: m} },
		run: "Idempotent", want: "sent 3 times (count 2, 2, 3) launched 7 instances; want 2"},
	// Forgets request ids once their instances are gone.
	"forgets-terminated-requests": {wrap: func(m *memprovider.Provider) provider.Provider { return &forgetsTerminated{Provider: m} },
		run: "Idempotent", want: "sent again after its instances were terminated, launched 2 instances; want none"},
	// Terminate does nothing.
	"terminate-noop": {wrap: func(m *memprovider.Provider) provider.Provider { return &terminateNoop{m} },
		run: "Terminate", want: "still not without terminated instance"},
	// Terminate fails on unknown ids.
	"terminate-unknown-fails": {wrap: func(m *memprovider.Provider) provider.Provider { return &terminateStrict{m} },
		run: "TerminateUnknown", want: "no such instance"},
	// PollErrors returns every error on every call.
	"errors-repeat": {wrap: func(m *memprovider.Provider) provider.Provider { return &repeatErrors{Provider: m} },
		run: "PollErrors", want: "reported the failure of request"},
	// Returns plain errors for bad requests.
	"untyped-errors": {wrap: func(m *memprovider.Provider) provider.Provider { return &untypedErrors{m} },
		run: "BadRequests", want: "want one matching invalid provider request"},
	// Does not check node_config against its schema.
	"lax-node-config": {wrap: func(m *memprovider.Provider) provider.Provider { return &laxNodeConfig{m} },
		run: "BadRequests", want: "Launch with node_config with an unknown setting: got no error"},
	// Ignores its context.
	"ignores-context": {wrap: func(m *memprovider.Provider) provider.Provider { return &ignoresContext{m} },
		run: "Context", want: "want one matching context canceled"},
	// Lists every cluster's instances.
	"lists-other-clusters": {wrap: func(m *memprovider.Provider) provider.Provider { return &listsAll{Provider: m} },
		run: "Clusters", want: "lists instances of cluster"},
	// Loses its state on a restart.
	"forgets-on-restart": {wrap: func(m *memprovider.Provider) provider.Provider { return m },
		run: "Restart", want: "after a restart List shows no instances"},
	// Echoes the cluster token in its errors.
	"leaks-token": {wrap: func(m *memprovider.Provider) provider.Provider { return &leaksToken{m} },
		run: "BadRequests", want: "shows the cluster token"},
	// Lists a launch's instances only a while after Launch returned.
	"lists-late": {wrap: func(m *memprovider.Provider) provider.Provider { return &listsLate{m} },
		run: "Launch", want: "List right after Launch returned shows 0 instances of the request; want 2"},
	// Launches its instances but never reports them running.
	"never-running": {wrap: func(m *memprovider.Provider) provider.Provider { return &neverRunning{m} },
		run: "Launch", want: "still not showing the 2 instances of the launch, running"},
}

// TestBuggyProviders runs the suite against deliberately broken
// providers, each in a child process (a failing suite fails its test), and
// checks that each bug is caught with the expected message.
func TestBuggyProviders(t *testing.T) {
	for name, b := range bugs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestBuggyChild$/^"+b.run+"$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "PROVIDERTEST_BUG="+name)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("the suite passed against a provider with bug %q (err %v):\n%s", name, err, out)
			}
			if !bytes.Contains(out, []byte("--- FAIL: TestBuggyChild/"+b.run)) {
				t.Errorf("subtest %s did not fail:\n%s", b.run, out)
			}
			if !bytes.Contains(out, []byte(b.want)) {
				t.Errorf("the failure does not say %q:\n%s", b.want, out)
			}
		})
	}
}

// TestBuggyChild is the child of TestBuggyProviders; it does nothing
// unless PROVIDERTEST_BUG names a bug.
func TestBuggyChild(t *testing.T) {
	name := os.Getenv("PROVIDERTEST_BUG")
	if name == "" {
		return
	}
	b, ok := bugs[name]
	if !ok {
		t.Fatalf("unknown bug %q", name)
	}
	opts := memOptions(func(_ *testing.T, p provider.Provider) provider.Provider {
		if name == "forgets-on-restart" {
			return memprovider.New()
		}
		return p
	})
	opts.SettleTimeout = 2 * time.Second
	providertest.Run(t, func(t *testing.T) provider.Provider { return b.wrap(memprovider.New()) }, opts)
}

// notIdempotent launches every request under a fresh id.
type notIdempotent struct {
	*memprovider.Provider
	mu sync.Mutex
	n  int
}

func (p *notIdempotent) Launch(ctx context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	p.mu.Lock()
	p.n++
	n := p.n
	p.mu.Unlock()
	r := *req
	r.RequestID = req.RequestID + "#" + strings.Repeat("x", n)
	resp, err := p.Provider.Launch(ctx, &r)
	return resp, err
}

func (p *notIdempotent) List(ctx context.Context, req *provider.ListRequest) (*provider.ListResponse, error) {
	r, err := p.Provider.List(ctx, req)
	if err != nil {
		return nil, err
	}
	for i := range r.Instances {
		r.Instances[i].RequestID, _, _ = strings.Cut(r.Instances[i].RequestID, "#")
	}
	return r, nil
}

// forgetsTerminated keeps request ids only while they have instances.
type forgetsTerminated struct {
	*memprovider.Provider
	mu   sync.Mutex
	gen  map[string]int
	seen map[string]bool // request id (with generation) has had instances
}

func (p *forgetsTerminated) Launch(ctx context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	p.mu.Lock()
	if p.gen == nil {
		p.gen, p.seen = map[string]int{}, map[string]bool{}
	}
	r := *req
	r.RequestID = req.RequestID + "#" + strings.Repeat("x", p.gen[req.RequestID])
	p.mu.Unlock()
	if err := ctx.Err(); err == nil && req.Validate() == nil {
		list, err := p.Provider.List(ctx, &provider.ListRequest{ClusterName: req.ClusterName})
		if err == nil {
			live := false
			for _, in := range list.Instances {
				if in.RequestID == r.RequestID {
					live = true
				}
			}
			p.mu.Lock()
			if p.seen[r.RequestID] && !live { // forgotten: a new generation
				p.gen[req.RequestID]++
				r.RequestID = req.RequestID + "#" + strings.Repeat("x", p.gen[req.RequestID])
			}
			p.seen[r.RequestID] = true
			p.mu.Unlock()
		}
	}
	return p.Provider.Launch(ctx, &r)
}

func (p *forgetsTerminated) List(ctx context.Context, req *provider.ListRequest) (*provider.ListResponse, error) {
	r, err := p.Provider.List(ctx, req)
	if err != nil {
		return nil, err
	}
	for i := range r.Instances {
		r.Instances[i].RequestID, _, _ = strings.Cut(r.Instances[i].RequestID, "#")
	}
	return r, nil
}

type terminateNoop struct{ *memprovider.Provider }

func (p *terminateNoop) Terminate(ctx context.Context, req *provider.TerminateRequest) (*provider.TerminateResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return &provider.TerminateResponse{}, ctx.Err()
}

type terminateStrict struct{ *memprovider.Provider }

func (p *terminateStrict) Terminate(ctx context.Context, req *provider.TerminateRequest) (*provider.TerminateResponse, error) {
	if req != nil && req.ClusterName != "" {
		list, err := p.Provider.List(ctx, &provider.ListRequest{ClusterName: req.ClusterName})
		if err != nil {
			return nil, err
		}
		for _, id := range req.InstanceIDs {
			found := false
			for _, in := range list.Instances {
				found = found || in.ID == id
			}
			if !found {
				return nil, errors.New("no such instance: " + id)
			}
		}
	}
	return p.Provider.Terminate(ctx, req)
}

// repeatErrors returns every error it was ever told, on every call.
type repeatErrors struct {
	*memprovider.Provider
	mu  sync.Mutex
	all map[string][]provider.LaunchError
}

func (p *repeatErrors) PollErrors(ctx context.Context, req *provider.PollErrorsRequest) (*provider.PollErrorsResponse, error) {
	r, err := p.Provider.PollErrors(ctx, req)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.all == nil {
		p.all = map[string][]provider.LaunchError{}
	}
	p.all[req.ClusterName] = append(p.all[req.ClusterName], r.Errors...)
	return &provider.PollErrorsResponse{Errors: append([]provider.LaunchError(nil), p.all[req.ClusterName]...)}, nil
}

// untypedErrors loses the identity of its errors.
type untypedErrors struct{ *memprovider.Provider }

func (p *untypedErrors) Launch(ctx context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	r, err := p.Provider.Launch(ctx, req)
	if err != nil {
		return nil, errors.New(err.Error())
	}
	return r, nil
}

// laxNodeConfig drops node_config settings it does not know.
type laxNodeConfig struct{ *memprovider.Provider }

func (p *laxNodeConfig) Launch(ctx context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	if req != nil && bytes.Contains(req.NodeConfig, []byte("no_such_setting")) {
		r := *req
		r.NodeConfig = nil
		req = &r
	}
	return p.Provider.Launch(ctx, req)
}

// ignoresContext calls on with a context that never ends.
type ignoresContext struct{ *memprovider.Provider }

func (p *ignoresContext) Launch(_ context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	return p.Provider.Launch(context.Background(), req)
}

func (p *ignoresContext) List(_ context.Context, req *provider.ListRequest) (*provider.ListResponse, error) {
	return p.Provider.List(context.Background(), req)
}

// listsAll lists the instances of every cluster it has launched in.
type listsAll struct {
	*memprovider.Provider
	mu       sync.Mutex
	clusters map[string]bool
}

func (p *listsAll) Launch(ctx context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	if req != nil {
		p.mu.Lock()
		if p.clusters == nil {
			p.clusters = map[string]bool{}
		}
		p.clusters[req.ClusterName] = true
		p.mu.Unlock()
	}
	return p.Provider.Launch(ctx, req)
}

func (p *listsAll) List(ctx context.Context, req *provider.ListRequest) (*provider.ListResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	var cs []string
	for c := range p.clusters {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	out := &provider.ListResponse{}
	for _, c := range cs {
		r, err := p.Provider.List(ctx, &provider.ListRequest{ClusterName: c})
		if err != nil {
			return nil, err
		}
		out.Instances = append(out.Instances, r.Instances...)
	}
	return out, nil
}

// leaksToken puts the cluster token into its errors.
type leaksToken struct{ *memprovider.Provider }

func (p *leaksToken) Launch(ctx context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	r, err := p.Provider.Launch(ctx, req)
	if err != nil && req != nil {
		return nil, provider.Errorf(provider.OpLaunch, req.ClusterName, req.RequestID, "%w (token %s)", err, req.Node.AuthToken)
	}
	return r, err
}

// neverRunning lists its instances as pending forever.
type neverRunning struct{ *memprovider.Provider }

func (p *neverRunning) List(ctx context.Context, req *provider.ListRequest) (*provider.ListResponse, error) {
	r, err := p.Provider.List(ctx, req)
	if err != nil {
		return nil, err
	}
	for i := range r.Instances {
		if r.Instances[i].State == provider.StateRunning {
			r.Instances[i].State = provider.StatePending
		}
	}
	return r, nil
}

type listsLate struct{ *memprovider.Provider }

func (p *listsLate) List(ctx context.Context, req *provider.ListRequest) (*provider.ListResponse, error) {
	r, err := p.Provider.List(ctx, req)
	if err != nil {
		return nil, err
	}
	r.Instances = slices.DeleteFunc(r.Instances, func(in provider.Instance) bool { return time.Since(in.LaunchedAt) < 500*time.Millisecond })
	return r, nil
}
