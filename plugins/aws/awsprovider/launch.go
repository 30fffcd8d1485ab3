package awsprovider

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/goray-dev/goray/sdk/provider"
)

// What node_config's ids look like.
var (
	instanceTypeRE = regexp.MustCompile(`^[a-z0-9-]+\.[a-z0-9-]+$`)
	imageIDRE      = regexp.MustCompile(`^ami-[0-9a-f]{8,32}$`)
	subnetIDRE     = regexp.MustCompile(`^subnet-[0-9a-f]{8,32}$`)
	groupIDRE      = regexp.MustCompile(`^sg-[0-9a-f]{8,32}$`)
	spotPriceRE    = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)
	volumeTypeRE   = regexp.MustCompile(`^[a-z0-9]+$`)
)

// maxTags is EC2's limit of tags per resource.
const maxTags = 50

const gib = 1 << 30

// Validate checks a node_config's values (what decoding it against its
// schema does not: id formats, tags, sizes); the error matches
// provider.ErrInvalidRequest and names each setting that is wrong.
func (nc NodeConfig) Validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if !instanceTypeRE.MatchString(nc.InstanceType) {
		bad("instance_type %q is not an EC2 instance type such as m7i.xlarge", nc.InstanceType)
	}
	if !imageIDRE.MatchString(nc.ImageID) {
		bad("image_id %q is not an AMI id (ami-<hex>)", nc.ImageID)
	}
	if nc.SubnetID != "" && !subnetIDRE.MatchString(nc.SubnetID) {
		bad("subnet_id %q is not a subnet id (subnet-<hex>)", nc.SubnetID)
	}
	for i, g := range nc.SecurityGroupIDs {
		if !groupIDRE.MatchString(g) {
			bad("security_group_ids[%d] %q is not a security group id (sg-<hex>)", i, g)
		}
	}
	if p := nc.IAMInstanceProfile; p != "" && !strings.HasPrefix(p, "arn:") && strings.ContainsAny(p, " /\t\n") {
		bad("iam_instance_profile %q is neither an instance profile name nor an ARN", p)
	}
	if nc.SpotMaxPrice != "" {
		if !nc.Spot {
			bad("spot_max_price is set but spot is false")
		}
		if !spotPriceRE.MatchString(nc.SpotMaxPrice) {
			bad("spot_max_price %q is not a price in USD such as \"0.25\"", nc.SpotMaxPrice)
		}
	}
	switch {
	case nc.RootVolumeSize < 0:
		bad("root_volume_size %d is negative", nc.RootVolumeSize)
	case nc.RootVolumeSize > 0 && (nc.RootVolumeSize%gib != 0 || nc.RootVolumeSize/gib > math.MaxInt32):
		bad("root_volume_size %d bytes is not a whole number of GiB (EBS sizes volumes in GiB), such as \"100GiB\"", nc.RootVolumeSize)
	}
	if !volumeTypeRE.MatchString(nc.RootVolumeType) {
		bad("root_volume_type %q is not an EBS volume type such as gp3", nc.RootVolumeType)
	}
	if len(nc.Tags) > maxTags-4 {
		bad("tags has %d tags; EC2 takes %d per instance, of which the provider uses 4", len(nc.Tags), maxTags)
	}
	for _, k := range sortedKeys(nc.Tags) {
		v := nc.Tags[k]
		switch {
		case k == "" || len(k) > 128:
			bad("tags: key %q must be 1 to 128 characters", k)
		case strings.HasPrefix(strings.ToLower(k), "aws:"):
			bad("tags: key %q: the aws: prefix is AWS's", k)
		case strings.HasPrefix(k, ReservedTagPrefix):
			bad("tags: key %q: the %s prefix is the provider's", k, ReservedTagPrefix)
		case len(v) > 256:
			bad("tags: the value of %q is %d characters; EC2 takes 256", k, len(v))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: node_config: %s", provider.ErrInvalidRequest, strings.Join(errs, "; "))
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ClientToken returns the client token of a launch request: EC2 runs a
// RunInstances call with a token it has seen once (AWS's idempotency
// tokens), so a request sent again after its answer was lost launches
// nothing more. It is the hex sha256 of the cluster name and request id
// (64 characters, EC2's limit).
func ClientToken(cluster, requestID string) string {
	h := sha256.Sum256([]byte(cluster + "\x00" + requestID))
	return hex.EncodeToString(h[:])
}

// requestLock serialises the launches of one request id in this process.
type requestLock struct {
	ch    chan struct{}
	users int
}

// lockRequest waits (honouring ctx) until no other launch of key runs in
// this process, and returns its release.
func (p *Provider) lockRequest(ctx context.Context, key string) (func(), error) {
	p.mu.Lock()
	l := p.requests[key]
	if l == nil {
		l = &requestLock{ch: make(chan struct{}, 1)}
		p.requests[key] = l
	}
	l.users++
	p.mu.Unlock()
	done := func() {
		p.mu.Lock()
		if l.users--; l.users == 0 {
			delete(p.requests, key)
		}
		p.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}

// recentTTL is how long an instance this process launched is listed
// without DescribeInstances showing it (EC2 is eventually consistent).
const recentTTL = 5 * time.Minute

// memoryTTL is how long this process remembers the requests it launched
// and the instances it terminated or reported (EC2 shows terminated
// instances for about an hour).
const memoryTTL = 3 * time.Hour

// recentInstance is an instance this process launched.
type recentInstance struct {
	cluster string
	inst    provider.Instance
	at      time.Time
}

// Launch implements provider.Provider: unless EC2 already shows instances
// of the request (in any state), it calls RunInstances for req.Count
// instances, with the request's client token, and returns once EC2 has
// accepted them; they then show in List.
func (p *Provider) Launch(ctx context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := p.caller(req.ClusterName, req.Node.AuthToken)
	if err != nil {
		return nil, err
	}
	s, log := c.s, c.log
	nc, err := provider.DecodeNodeConfig[NodeConfig](req.NodeConfig)
	if err != nil {
		return nil, err
	}
	if err := nc.Validate(); err != nil {
		return nil, err
	}
	if req.Node.HeadAddress == "" {
		return nil, fmt.Errorf("%w: the node spec has no head address", provider.ErrInvalidRequest)
	}
	gorayPath := s.gorayPath
	if g := req.Node.GorayBinary; g != "" {
		if !safePath.MatchString(g) || strings.Contains(g, "..") {
			return nil, fmt.Errorf("%w: the node spec's goray binary %q is not an absolute path of letters, digits and /._+-", provider.ErrInvalidRequest, g)
		}
		gorayPath = g
	}
	for what, v := range map[string]string{"cluster name": req.ClusterName, "node type": req.NodeType, "request id": req.RequestID} {
		if len(v) > 200 {
			return nil, fmt.Errorf("%w: the %s is %d bytes; EC2 tags take 256 and the provider wants at most 200", provider.ErrInvalidRequest, what, len(v))
		}
	}
	ud, err := userData{cluster: req.ClusterName, nodeType: req.NodeType, requestID: req.RequestID, node: req.Node, extraArgs: nc.ExtraArgs,
		gorayPath: gorayPath, gorayURL: s.gorayURL, goraySHA256: s.goraySHA256, instanceDir: s.instanceDir}.render()
	if err != nil {
		return nil, err
	}
	key := req.ClusterName + "\x00" + req.RequestID
	release, err := p.lockRequest(ctx, key)
	if err != nil {
		return nil, err
	}
	defer release()
	p.mu.Lock()
	_, done := p.launched[key]
	p.mu.Unlock()
	if done {
		return &provider.LaunchResponse{}, nil
	}
	// EC2 shows the request's instances (also once terminated, for about
	// an hour): launched already, by this process or another.
	found, err := p.describe(ctx, c, []types.Filter{
		tagFilter(TagCluster, req.ClusterName), tagFilter(TagRequest, req.RequestID),
	})
	if err != nil {
		return nil, err
	}
	if len(found) > 0 {
		log.Info("launch request already launched", "cluster", req.ClusterName, "request", req.RequestID, "instances", len(found))
		p.remember(key)
		return &provider.LaunchResponse{}, nil
	}
	in, err := p.runInput(ctx, c, req, nc, ud)
	if err != nil {
		return nil, err
	}
	out, err := call(ctx, c, "RunInstances", func(ctx context.Context) (*ec2.RunInstancesOutput, error) {
		return s.ec2.RunInstances(ctx, in)
	})
	if err != nil {
		if codeOf(err) == "IdempotentParameterMismatch" {
			// EC2 ran this client token before (with another count or
			// user data): the request was launched.
			log.Info("launch request already launched (EC2 knows its client token)", "cluster", req.ClusterName, "request", req.RequestID)
			p.remember(key)
			return &provider.LaunchResponse{}, nil
		}
		return nil, err
	}
	now := time.Now()
	ids := make([]string, 0, len(out.Instances))
	p.mu.Lock()
	p.rememberLocked(key, now)
	for _, i := range out.Instances {
		inst := toInstance(i)
		inst.NodeType, inst.RequestID = req.NodeType, req.RequestID
		if inst.LaunchedAt.IsZero() {
			inst.LaunchedAt = now
		}
		if inst.State == "" {
			inst.State = provider.StatePending
		}
		p.recent[inst.ID] = &recentInstance{cluster: req.ClusterName, inst: inst, at: now}
		ids = append(ids, inst.ID)
	}
	p.mu.Unlock()
	log.Info("launched instances", "cluster", req.ClusterName, "node_type", req.NodeType, "request", req.RequestID,
		"instance_type", nc.InstanceType, "spot", nc.Spot, "instances", ids)
	return &provider.LaunchResponse{}, nil
}

// remember records that the request of key was launched.
func (p *Provider) remember(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rememberLocked(key, time.Now())
}

func (p *Provider) rememberLocked(key string, now time.Time) {
	p.launched[key] = now
	for k, at := range p.launched {
		if now.Sub(at) > memoryTTL {
			delete(p.launched, k)
		}
	}
}

func tagFilter(key, value string) types.Filter {
	return types.Filter{Name: aws.String("tag:" + key), Values: []string{value}}
}

// runInput returns the RunInstances call of a launch.
func (p *Provider) runInput(ctx context.Context, c caller, req *provider.LaunchRequest, nc NodeConfig, ud string) (*ec2.RunInstancesInput, error) {
	if req.Count > math.MaxInt32 {
		return nil, fmt.Errorf("%w: count %d is too large", provider.ErrInvalidRequest, req.Count)
	}
	tags := []types.Tag{
		{Key: aws.String(TagCluster), Value: aws.String(req.ClusterName)},
		{Key: aws.String(TagNodeType), Value: aws.String(req.NodeType)},
		{Key: aws.String(TagRequest), Value: aws.String(req.RequestID)},
	}
	if _, ok := nc.Tags[TagName]; !ok {
		tags = append(tags, types.Tag{Key: aws.String(TagName), Value: aws.String(truncate("goray-"+req.ClusterName+"-"+req.NodeType, 256))})
	}
	for _, k := range sortedKeys(nc.Tags) {
		tags = append(tags, types.Tag{Key: aws.String(k), Value: aws.String(nc.Tags[k])})
	}
	in := &ec2.RunInstancesInput{
		ImageId:      aws.String(nc.ImageID),
		InstanceType: types.InstanceType(nc.InstanceType),
		MinCount:     aws.Int32(int32(req.Count)),
		MaxCount:     aws.Int32(int32(req.Count)),
		ClientToken:  aws.String(ClientToken(req.ClusterName, req.RequestID)),
		UserData:     aws.String(base64.StdEncoding.EncodeToString([]byte(ud))),
		TagSpecifications: []types.TagSpecification{
			{ResourceType: types.ResourceTypeInstance, Tags: tags},
			{ResourceType: types.ResourceTypeVolume, Tags: tags},
		},
		// IMDSv2 only: the user data (which holds the cluster token) is
		// not served to a plain GET from a process that a request forger
		// tricks.
		MetadataOptions: &types.InstanceMetadataOptionsRequest{
			HttpEndpoint: types.InstanceMetadataEndpointStateEnabled,
			HttpTokens:   types.HttpTokensStateRequired,
		},
		// A node that shuts its machine down ends the instance: nothing
		// stays stopped (and billed for its volumes).
		InstanceInitiatedShutdownBehavior: types.ShutdownBehaviorTerminate,
	}
	if nc.SubnetID != "" {
		in.SubnetId = aws.String(nc.SubnetID)
	}
	if len(nc.SecurityGroupIDs) > 0 {
		in.SecurityGroupIds = nc.SecurityGroupIDs
	}
	if nc.KeyName != "" {
		in.KeyName = aws.String(nc.KeyName)
	}
	if prof := nc.IAMInstanceProfile; prof != "" {
		if strings.HasPrefix(prof, "arn:") {
			in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Arn: aws.String(prof)}
		} else {
			in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Name: aws.String(prof)}
		}
	}
	if nc.Spot {
		spot := &types.SpotMarketOptions{
			SpotInstanceType:             types.SpotInstanceTypeOneTime,
			InstanceInterruptionBehavior: types.InstanceInterruptionBehaviorTerminate,
		}
		if nc.SpotMaxPrice != "" {
			spot.MaxPrice = aws.String(nc.SpotMaxPrice)
		}
		in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot, SpotOptions: spot}
	}
	if nc.RootVolumeSize > 0 {
		dev, err := p.rootDevice(ctx, c, nc.ImageID)
		if err != nil {
			return nil, err
		}
		in.BlockDeviceMappings = []types.BlockDeviceMapping{{
			DeviceName: aws.String(dev),
			Ebs: &types.EbsBlockDevice{
				VolumeSize:          aws.Int32(int32(nc.RootVolumeSize / gib)),
				VolumeType:          types.VolumeType(nc.RootVolumeType),
				DeleteOnTermination: aws.Bool(true),
			},
		}}
	}
	return in, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// rootDevice returns the root device name of an image (DescribeImages,
// cached): where root_volume_size applies.
func (p *Provider) rootDevice(ctx context.Context, c caller, image string) (string, error) {
	p.mu.Lock()
	dev, ok := p.rootDevices[image]
	p.mu.Unlock()
	if ok {
		return dev, nil
	}
	out, err := call(ctx, c, "DescribeImages", func(ctx context.Context) (*ec2.DescribeImagesOutput, error) {
		return c.s.ec2.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{image}})
	})
	if err != nil {
		return "", err
	}
	if len(out.Images) == 0 || aws.ToString(out.Images[0].RootDeviceName) == "" {
		return "", fmt.Errorf("%w: image %s: EC2 shows no such image, or none with a root device (node_config image_id)", provider.ErrNotFound, image)
	}
	dev = aws.ToString(out.Images[0].RootDeviceName)
	p.mu.Lock()
	p.rootDevices[image] = dev
	p.mu.Unlock()
	return dev, nil
}
