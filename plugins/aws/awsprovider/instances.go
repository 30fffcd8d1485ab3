package awsprovider

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/goray-dev/goray/sdk/provider"
)

// describe returns every instance matching filters (DescribeInstances,
// page by page, each page retried as call does).
func (p *Provider) describe(ctx context.Context, c caller, filters []types.Filter) ([]types.Instance, error) {
	var out []types.Instance
	in := &ec2.DescribeInstancesInput{Filters: filters, MaxResults: aws.Int32(1000)}
	for {
		page, err := call(ctx, c, "DescribeInstances", func(ctx context.Context) (*ec2.DescribeInstancesOutput, error) {
			return c.s.ec2.DescribeInstances(ctx, in)
		})
		if err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			out = append(out, r.Instances...)
		}
		if aws.ToString(page.NextToken) == "" {
			return out, nil
		}
		next := *in
		next.NextToken = page.NextToken
		in = &next
	}
}

// tag returns the value of an instance's tag ("" when it has none).
func tag(i types.Instance, key string) string {
	for _, t := range i.Tags {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

// stateOf maps EC2's instance state: pending is pending, running is
// running, and shutting-down, stopping and stopped are terminating (the
// autoscaler terminates an instance listed terminating that it did not
// terminate: a stopped instance runs no node). ok is false for
// terminated.
func stateOf(s types.InstanceStateName) (provider.InstanceState, bool) {
	switch s {
	case types.InstanceStateNamePending:
		return provider.StatePending, true
	case types.InstanceStateNameRunning:
		return provider.StateRunning, true
	case types.InstanceStateNameTerminated:
		return "", false
	default:
		return provider.StateTerminating, true
	}
}

// toInstance maps an EC2 instance, its node type and request from its
// tags.
func toInstance(i types.Instance) provider.Instance {
	var st provider.InstanceState
	if i.State != nil {
		st, _ = stateOf(i.State.Name)
	}
	return provider.Instance{
		ID:         aws.ToString(i.InstanceId),
		NodeType:   tag(i, TagNodeType),
		RequestID:  tag(i, TagRequest),
		State:      st,
		Address:    aws.ToString(i.PrivateIpAddress),
		LaunchedAt: aws.ToTime(i.LaunchTime),
	}
}

// clusterInstances returns every instance EC2 shows with the cluster's
// tag, terminated ones included.
func (p *Provider) clusterInstances(ctx context.Context, c caller, cluster string) ([]types.Instance, error) {
	return p.describe(ctx, c, []types.Filter{tagFilter(TagCluster, cluster)})
}

// List implements provider.Provider: DescribeInstances of the cluster's
// tag, plus the instances this process launched that EC2 does not show
// yet.
func (p *Provider) List(ctx context.Context, req *provider.ListRequest) (*provider.ListResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := p.caller(req.ClusterName, "")
	if err != nil {
		return nil, err
	}
	all, err := p.clusterInstances(ctx, c, req.ClusterName)
	if err != nil {
		return nil, err
	}
	out := &provider.ListResponse{}
	seen := map[string]bool{}
	for _, i := range all {
		in := toInstance(i)
		seen[in.ID] = true
		if i.State == nil || i.State.Name == types.InstanceStateNameTerminated {
			continue
		}
		out.Instances = append(out.Instances, in)
	}
	now := time.Now()
	p.mu.Lock()
	for id, r := range p.recent {
		switch {
		case seen[id] || now.Sub(r.at) > recentTTL:
			delete(p.recent, id)
		case r.cluster == req.ClusterName:
			out.Instances = append(out.Instances, r.inst)
		}
	}
	p.mu.Unlock()
	return out, nil
}

// instanceIDRE is what an EC2 instance id looks like.
var instanceIDRE = regexp.MustCompile(`^i-[0-9a-f]{8,32}$`)

// maxFilterValues bounds the instance ids of one DescribeInstances
// filter.
const maxFilterValues = 200

// Terminate implements provider.Provider: of the instances named, those
// EC2 shows with the cluster's tag (and those this process launched for
// the cluster that EC2 does not show yet) are tagged TagTerminate and
// terminated. Others, unknown ids and instances of other clusters, are
// left alone.
func (p *Provider) Terminate(ctx context.Context, req *provider.TerminateRequest) (*provider.TerminateResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := p.caller(req.ClusterName, "")
	if err != nil {
		return nil, err
	}
	log := c.log
	// Only EC2 instance ids can name instances of the cluster.
	var ids []string
	for _, id := range req.InstanceIDs {
		if instanceIDRE.MatchString(id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 0 {
		return &provider.TerminateResponse{}, nil
	}
	var targets []string
	for chunk := range slices.Chunk(ids, maxFilterValues) {
		found, err := p.describe(ctx, c, []types.Filter{
			{Name: aws.String("instance-id"), Values: chunk},
			tagFilter(TagCluster, req.ClusterName),
			{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}},
		})
		if err != nil {
			return nil, err
		}
		for _, i := range found {
			targets = append(targets, aws.ToString(i.InstanceId))
		}
	}
	p.mu.Lock()
	for _, id := range ids {
		if r := p.recent[id]; r != nil && r.cluster == req.ClusterName && !slices.Contains(targets, id) && r.inst.State != provider.StateTerminating {
			targets = append(targets, id)
		}
	}
	p.mu.Unlock()
	if len(targets) == 0 {
		return &provider.TerminateResponse{}, nil
	}
	slices.Sort(targets)
	mark := req.RequestID
	if mark == "" {
		mark = "terminate"
	}
	now := time.Now()
	p.mu.Lock()
	for _, id := range targets {
		p.terminated[id] = now
	}
	p.mu.Unlock()
	for chunk := range slices.Chunk(targets, maxFilterValues) {
		// The tag tells PollErrors (of any process) that goray terminated
		// it; a failure to tag is logged, and this process remembers.
		_, err := call(ctx, c, "CreateTags", func(ctx context.Context) (*ec2.CreateTagsOutput, error) {
			return c.s.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: chunk,
				Tags: []types.Tag{{Key: aws.String(TagTerminate), Value: aws.String(truncate(mark, 256))}}})
		})
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return nil, err
			}
			log.Warn("tagging instances before terminating them failed", "instances", chunk, "error", err)
		}
		if err := p.terminate(ctx, c, chunk); err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	for _, id := range targets {
		if r := p.recent[id]; r != nil {
			r.inst.State = provider.StateTerminating
		}
	}
	p.mu.Unlock()
	log.Info("terminating instances", "cluster", req.ClusterName, "request", req.RequestID, "instances", targets)
	return &provider.TerminateResponse{}, nil
}

// terminate calls TerminateInstances; an instance EC2 does not know (gone
// meanwhile, or not visible yet) is tried alone, and is no error if EC2
// still does not know it. (One launched a moment ago that EC2 shows only
// later shows running again: the autoscaler, whose terminate it was,
// terminates it again.)
func (p *Provider) terminate(ctx context.Context, c caller, ids []string) error {
	run := func(ids []string) error {
		_, err := call(ctx, c, "TerminateInstances", func(ctx context.Context) (*ec2.TerminateInstancesOutput, error) {
			return c.s.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
		})
		return err
	}
	err := run(ids)
	if err == nil || codeOf(err) != "InvalidInstanceID.NotFound" {
		return err
	}
	for _, id := range ids {
		if err := run([]string{id}); err != nil && codeOf(err) != "InvalidInstanceID.NotFound" {
			return err
		}
	}
	return nil
}

// PollErrors implements provider.Provider: the instances of the cluster
// that EC2 shut down or terminated without goray asking (no TagTerminate,
// not terminated by this process) — a spot instance EC2 found no capacity
// for or reclaimed, a volume limit, an instance terminated by hand — each
// reported once by this process, as a launch error with EC2's state
// reason.
func (p *Provider) PollErrors(ctx context.Context, req *provider.PollErrorsRequest) (*provider.PollErrorsResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := p.caller(req.ClusterName, "")
	if err != nil {
		return nil, err
	}
	gone, err := p.describe(ctx, c, []types.Filter{
		tagFilter(TagCluster, req.ClusterName),
		{Name: aws.String("instance-state-name"), Values: []string{"shutting-down", "terminated"}},
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(gone, func(a, b types.Instance) int { return aws.ToTime(a.LaunchTime).Compare(aws.ToTime(b.LaunchTime)) })
	now := time.Now()
	out := &provider.PollErrorsResponse{}
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, at := range p.terminated {
		if now.Sub(at) > memoryTTL {
			delete(p.terminated, id)
		}
	}
	for id, at := range p.reported {
		if now.Sub(at) > memoryTTL {
			delete(p.reported, id)
		}
	}
	for _, i := range gone {
		id := aws.ToString(i.InstanceId)
		if tag(i, TagTerminate) != "" || !p.terminated[id].IsZero() || !p.reported[id].IsZero() {
			continue
		}
		p.reported[id] = now
		var why []string
		if r := i.StateReason; r != nil {
			code, msg := aws.ToString(r.Code), aws.ToString(r.Message)
			switch msg = strings.TrimPrefix(msg, code+": "); {
			case code != "" && msg != "":
				why = append(why, code+": "+msg)
			case code+msg != "":
				why = append(why, code+msg)
			}
		}
		if t := aws.ToString(i.StateTransitionReason); t != "" {
			why = append(why, t)
		}
		reason := "EC2 gave no reason"
		if len(why) > 0 {
			reason = strings.Join(why, "; ")
		}
		state := "terminated"
		if i.State != nil {
			state = string(i.State.Name)
		}
		msg := fmt.Sprintf("EC2 instance %s (node type %q, launch request %s) was %s without goray asking: %s",
			id, tag(i, TagNodeType), tag(i, TagRequest), state, reason)
		out.Errors = append(out.Errors, provider.LaunchError{Op: provider.ErrorOpLaunch, RequestID: tag(i, TagRequest), NodeType: tag(i, TagNodeType),
			Count: 1, InstanceID: id, Message: redact(msg, c.secrets), At: now})
		c.log.Warn("an instance ended without goray asking", "cluster", req.ClusterName, "instance", id, "reason", reason)
	}
	return out, nil
}
