package awsprovider_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/goray-dev/goray/internal/testservers/mototest"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/plugins/aws/awsprovider"
	"github.com/goray-dev/goray/sdk/provider"
)

// fakeSHA is the goray_sha256 of tests whose instances never run their
// user data.
const fakeSHA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// testConfig returns the provider's config for the EC2 API at endpoint
// (moto, or a proxy in front of it), with short retries.
func testConfig(endpoint string) awsprovider.Config {
	cfg := awsprovider.DefaultConfig()
	cfg.Region = mototest.Region
	cfg.Endpoint = endpoint
	cfg.AccessKey, cfg.SecretKey = mototest.AccessKey, mototest.SecretKey
	cfg.GorayURL = "https://downloads.example.com/goray"
	cfg.GoraySHA256 = fakeSHA
	cfg.MaxRetries = 3
	cfg.RetryInitialInterval, cfg.RetryMaxInterval = 10*time.Millisecond, 50*time.Millisecond
	return cfg
}

// open returns a provider configured with testConfig(endpoint) changed by
// mod.
func open(t *testing.T, endpoint string, mod ...func(*awsprovider.Config)) *awsprovider.Provider {
	t.Helper()
	cfg := testConfig(endpoint)
	for _, f := range mod {
		f(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	p, err := awsprovider.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// nodeConfig returns a node_config of an instance type and image moto
// knows, with the settings of extra added.
func nodeConfig(t *testing.T, extra map[string]any) []byte {
	t.Helper()
	m := map[string]any{"instance_type": mototest.InstanceType, "image_id": mototest.ImageID}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ec2Client returns an SDK client of the EC2 API at endpoint, for the
// tests' own looks.
func ec2Client(endpoint string) *ec2.Client { return ec2.NewFromConfig(mototest.AWSConfig(endpoint)) }

// describe returns the instances EC2 shows with the tag key=value.
func describe(ctx context.Context, t *testing.T, c *ec2.Client, key, value string) []types.Instance {
	t.Helper()
	out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{{Name: aws.String("tag:" + key), Values: []string{value}}}})
	if err != nil {
		t.Fatalf("DescribeInstances: %v", err)
	}
	var ins []types.Instance
	for _, r := range out.Reservations {
		ins = append(ins, r.Instances...)
	}
	return ins
}

// states returns the instances' ids with their states.
func states(ins []types.Instance) map[string]string {
	m := map[string]string{}
	for _, i := range ins {
		m[aws.ToString(i.InstanceId)] = string(i.State.Name)
	}
	return m
}

// tagsOf returns an instance's tags as a map.
func tagsOf(i types.Instance) map[string]string {
	m := map[string]string{}
	for _, tg := range i.Tags {
		m[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
	}
	return m
}

// userDataOf returns the decoded user data of an instance
// (DescribeInstanceAttribute).
func userDataOf(ctx context.Context, t *testing.T, c *ec2.Client, id string) string {
	t.Helper()
	out, err := c.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String(id), Attribute: types.InstanceAttributeNameUserData})
	if err != nil {
		t.Fatalf("DescribeInstanceAttribute userData of %s: %v", id, err)
	}
	if out.UserData == nil {
		t.Fatalf("instance %s has no user data", id)
	}
	b, err := base64.StdEncoding.DecodeString(aws.ToString(out.UserData.Value))
	if err != nil {
		t.Fatalf("the user data of %s is not base64: %v", id, err)
	}
	return string(b)
}

// launchReq returns a launch request of count instances of node type
// "cpu" in cluster.
func launchReq(t *testing.T, cluster, id string, count int, token string) *provider.LaunchRequest {
	return &provider.LaunchRequest{RequestID: id, ClusterName: cluster, NodeType: "cpu", Count: count, NodeConfig: nodeConfig(t, nil),
		Node: provider.NodeSpec{HeadAddress: "10.0.0.1:6380", AuthToken: token,
			Resources: map[string]float64{provider.ResourceCPU: 2},
			Labels:    map[string]string{provider.LabelClusterName: cluster, provider.LabelNodeType: "cpu"}}}
}

// list returns the ids of the cluster's instances, sorted.
func list(ctx context.Context, t *testing.T, p provider.Provider, cluster string) []provider.Instance {
	t.Helper()
	l, err := p.List(ctx, &provider.ListRequest{ClusterName: cluster})
	if err != nil {
		t.Fatalf("List %s: %v", cluster, err)
	}
	slices.SortFunc(l.Instances, func(a, b provider.Instance) int { return strings.Compare(a.ID, b.ID) })
	return l.Instances
}

// failMarker is the node_config tag whose launches the conformance
// suite's proxy ends at once, behind the provider's back
// (mototest.Proxy.TerminateMarked), as EC2 does with a spot instance it
// has no capacity for.
const failMarker = "mototest-terminate-at-once"

// failingLaunch is the conformance suite's FailingLaunch: a launch EC2
// accepts and whose instance then ends (see failMarker).
func failingLaunch(t *testing.T) func(*provider.LaunchRequest) {
	return func(r *provider.LaunchRequest) {
		r.NodeConfig = nodeConfig(t, map[string]any{"tags": map[string]string{"test": failMarker}})
	}
}
