// Package memprovider is a provider.Provider held in memory, for the SDK's
// own tests: it passes the conformance suite and is the base the suite's
// tests break on purpose. Its instances are records that move from
// pending to running (and from terminating to gone) one List call after
// they got there, so the suite's waiting is exercised.
package memprovider

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/goray-dev/goray/sdk/provider"
)

// NodeConfig is the memory provider's node_config block.
type NodeConfig struct {
	// Fail makes the launch fail after it was accepted: no instance
	// starts and PollErrors reports it.
	Fail bool `hcl:"fail" default:"false" doc:"Accept the launch, then fail it (reported by PollErrors)."`
	// Zone is recorded and ignored.
	Zone string `hcl:"zone" default:"a" doc:"Zone of the instances (ignored)."`
}

// State is what a memory provider keeps across a restart: Restart hands
// it to a new Provider.
type State struct {
	mu        sync.Mutex
	next      int
	requests  map[string]bool // request ids accepted
	instances map[string]*instance
	errors    map[string][]provider.LaunchError // by cluster
}

type instance struct {
	cluster string
	inst    provider.Instance
	listed  bool // listed in its current state once
}

// Provider is an in-memory provider.
type Provider struct {
	s *State
}

// New returns a provider with no instances.
func New() *Provider {
	return &Provider{s: &State{requests: map[string]bool{}, instances: map[string]*instance{}, errors: map[string][]provider.LaunchError{}}}
}

// Restart returns a new Provider over p's state, as a provider process
// restarted on the same state file.
func (p *Provider) Restart() *Provider { return &Provider{s: p.s} }

// Name implements provider.Named.
func (p *Provider) Name() string { return "memory" }

// NodeConfigSchema implements provider.Provider.
func (p *Provider) NodeConfigSchema(ctx context.Context, _ *provider.NodeConfigSchemaRequest) (*provider.NodeConfigSchemaResponse, error) {
	return provider.NodeConfigSchemaOf[NodeConfig](ctx)
}

// Launch implements provider.Provider.
func (p *Provider) Launch(ctx context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	nc, err := provider.DecodeNodeConfig[NodeConfig](req.NodeConfig)
	if err != nil {
		return nil, err
	}
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.requests[req.RequestID] {
		return &provider.LaunchResponse{}, nil
	}
	s.requests[req.RequestID] = true
	now := time.Now()
	if nc.Fail {
		s.errors[req.ClusterName] = append(s.errors[req.ClusterName], provider.LaunchError{
			Op: provider.ErrorOpLaunch, RequestID: req.RequestID, NodeType: req.NodeType, Count: req.Count,
			Message: "memprovider: node_config says fail = true", At: now,
		})
		return &provider.LaunchResponse{}, nil
	}
	for range req.Count {
		s.next++
		id := fmt.Sprintf("mem-%d", s.next)
		s.instances[id] = &instance{cluster: req.ClusterName, inst: provider.Instance{
			ID: id, NodeType: req.NodeType, RequestID: req.RequestID, State: provider.StatePending,
			Address: fmt.Sprintf("10.0.%d.%d", s.next/250, s.next%250+1), LaunchedAt: now,
		}}
	}
	return &provider.LaunchResponse{}, nil
}

// Terminate implements provider.Provider.
func (p *Provider) Terminate(ctx context.Context, req *provider.TerminateRequest) (*provider.TerminateResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range req.InstanceIDs {
		in, ok := s.instances[id]
		if !ok || in.cluster != req.ClusterName || in.inst.State == provider.StateTerminating {
			continue
		}
		in.inst.State = provider.StateTerminating
		in.listed = false
	}
	return &provider.TerminateResponse{}, nil
}

// List implements provider.Provider. An instance listed once as pending is
// running at the next List; one listed once as terminating is gone.
func (p *Provider) List(ctx context.Context, req *provider.ListRequest) (*provider.ListResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &provider.ListResponse{}
	for id, in := range s.instances {
		if in.cluster != req.ClusterName {
			continue
		}
		if in.listed {
			switch in.inst.State {
			case provider.StatePending:
				in.inst.State = provider.StateRunning
			case provider.StateTerminating:
				delete(s.instances, id)
				continue
			}
		}
		in.listed = true
		out.Instances = append(out.Instances, in.inst)
	}
	slices.SortFunc(out.Instances, func(a, b provider.Instance) int { return compare(a.ID, b.ID) })
	return out, nil
}

func compare(a, b string) int {
	switch {
	case len(a) != len(b):
		return len(a) - len(b)
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// PollErrors implements provider.Provider.
func (p *Provider) PollErrors(ctx context.Context, req *provider.PollErrorsRequest) (*provider.PollErrorsResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := s.errors[req.ClusterName]
	delete(s.errors, req.ClusterName)
	return &provider.PollErrorsResponse{Errors: errs}, nil
}

var _ provider.Provider = (*Provider)(nil)
