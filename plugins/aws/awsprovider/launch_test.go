package awsprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/testservers/mototest"
	"github.com/goray-dev/goray/plugins/aws/awsprovider"
	"github.com/goray-dev/goray/sdk/provider"
)

const testToken = "0123456789abcdef-the-cluster-token-fedcba9876543210"

// TestLaunchListTerminate: a launch makes Count instances of the node
// type's settings, tagged with the cluster, node type, request, Name and
// the node type's tags, with IMDSv2 required, the request's client token
// and user data that installs goray (checked against its sha256), writes
// the token to a root-only file and runs `goray start` with the head's
// address, the resources and labels, the instance's id and private IP;
// the token is in the user data only in that file's write. List maps them;
// Terminate tags and terminates them.
func TestLaunchListTerminate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	moto := mototest.Start(t)
	c := ec2Client(moto.Endpoint)
	p := open(t, moto.Endpoint, func(cfg *awsprovider.Config) { cfg.GorayPath = "/opt/goray/bin/goray" })
	const cluster = "tags"
	req := launchReq(t, cluster, "req-1", 2, testToken)
	req.NodeConfig = nodeConfig(t, map[string]any{"tags": map[string]string{"team": "ml", "cost-center": "42"},
		"extra_args": []string{"--log-level", "debug"}})
	req.Node.Resources = map[string]float64{provider.ResourceCPU: 2, provider.ResourceGPU: 1, "accel": 0.5}
	req.Node.Labels["pool"] = "it's a pool"
	req.Node.SetupCommands = []string{"apt-get install -y libfoo", "echo 'ready' > /tmp/setup-done"}
	start := time.Now()
	if _, err := p.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	got := list(ctx, t, p, cluster)
	if len(got) != 2 {
		t.Fatalf("List after a launch of 2: %+v", got)
	}
	ins := describe(ctx, t, c, awsprovider.TagCluster, cluster)
	if len(ins) != 2 {
		t.Fatalf("EC2 shows %d instances of the cluster; want 2", len(ins))
	}
	for k, i := range ins {
		id := aws.ToString(i.InstanceId)
		l := got[slices.IndexFunc(got, func(in provider.Instance) bool { return in.ID == id })]
		if l.NodeType != "cpu" || l.RequestID != "req-1" || l.State != provider.StateRunning || l.Address != aws.ToString(i.PrivateIpAddress) || l.Address == "" ||
			l.LaunchedAt.Before(start.Add(-time.Minute)) {
			t.Errorf("List shows %+v for EC2's %s (%s, %s)", l, id, i.State.Name, aws.ToString(i.PrivateIpAddress))
		}
		want := map[string]string{awsprovider.TagCluster: cluster, awsprovider.TagNodeType: "cpu", awsprovider.TagRequest: "req-1",
			"Name": "goray-tags-cpu", "team": "ml", "cost-center": "42"}
		if tags := tagsOf(i); !maps.Equal(tags, want) {
			t.Errorf("instance %s has tags %v; want %v", id, tags, want)
		}
		if string(i.InstanceType) != mototest.InstanceType || aws.ToString(i.ImageId) != mototest.ImageID {
			t.Errorf("instance %s is %s of %s", id, i.InstanceType, aws.ToString(i.ImageId))
		}
		if i.MetadataOptions == nil || i.MetadataOptions.HttpTokens != types.HttpTokensStateRequired {
			t.Errorf("instance %s does not require IMDSv2: %+v", id, i.MetadataOptions)
		}
		if tok := aws.ToString(i.ClientToken); tok != awsprovider.ClientToken(cluster, "req-1") {
			t.Errorf("instance %s has client token %q; want %q", id, tok, awsprovider.ClientToken(cluster, "req-1"))
		}
		ud := userDataOf(ctx, t, c, id)
		if k == 0 {
			t.Logf("user data:\n%s", ud)
		}
		checkUserData(t, ud)
	}
	if pe, err := p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: cluster}); err != nil || len(pe.Errors) != 0 {
		t.Errorf("PollErrors: %+v, %v; want none", pe, err)
	}

	// Terminate: tagged, then terminated; gone from List; no error.
	ids := []string{got[0].ID, got[1].ID}
	if _, err := p.Terminate(ctx, &provider.TerminateRequest{RequestID: "t-1", ClusterName: cluster, InstanceIDs: ids}); err != nil {
		t.Fatal(err)
	}
	for _, i := range describe(ctx, t, c, awsprovider.TagCluster, cluster) {
		if i.State.Name != types.InstanceStateNameTerminated && i.State.Name != types.InstanceStateNameShuttingDown {
			t.Errorf("instance %s is %s after Terminate", aws.ToString(i.InstanceId), i.State.Name)
		}
		if v := tagsOf(i)[awsprovider.TagTerminate]; v != "t-1" {
			t.Errorf("instance %s has %s=%q; want t-1", aws.ToString(i.InstanceId), awsprovider.TagTerminate, v)
		}
	}
	if l := list(ctx, t, p, cluster); len(l) != 0 {
		t.Errorf("List after Terminate: %+v", l)
	}
	if pe, err := p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: cluster}); err != nil || len(pe.Errors) != 0 {
		t.Errorf("PollErrors after goray terminated the instances: %+v, %v; want none", pe, err)
	}
	// A new provider (another process) does not take them for failures
	// either: the tag says goray terminated them.
	p2 := open(t, moto.Endpoint)
	if pe, err := p2.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: cluster}); err != nil || len(pe.Errors) != 0 {
		t.Errorf("PollErrors of a new provider: %+v, %v; want none", pe, err)
	}
}

// checkUserData checks the user data of TestLaunchListTerminate's
// instances.
func checkUserData(t *testing.T, ud string) {
	t.Helper()
	for _, want := range []string{
		"#!/bin/sh\n",
		"set -eu\n",
		"GORAY=/opt/goray/bin/goray\n",
		"GORAY_URL=https://downloads.example.com/goray\n",
		"GORAY_SHA256=" + fakeSHA + "\n",
		"GORAY_DIR=/var/lib/goray\n",
		`curl -fsSL --retry 10 --retry-connrefused -o "$tmp" "$GORAY_URL"`,
		`if [ "$got" != "$GORAY_SHA256" ]; then`,
		`mv -f "$tmp" "$GORAY"`,
		"X-aws-ec2-metadata-token",
		"printf '%s\\n' " + testToken + " > \"$GORAY_DIR/auth_token\"\n",
		"chmod 0600 \"$GORAY_DIR/auth_token\"\n",
		`/bin/sh -c 'apt-get install -y libfoo' || { say 'setup command 1 of 2 failed: the node is not started'; exit 1; }`,
		`/bin/sh -c 'echo '\''ready'\'' > /tmp/setup-done' || {`,
		`exec /opt/goray/bin/goray start --address 10.0.0.1:6380 --node-ip "${NODE_IP}" --temp-dir "${GORAY_DIR}"/t --block --auth-token-file "${GORAY_DIR}"/auth_token --node-name "${INSTANCE_ID}" --num-cpus 2 --num-gpus 1 --resources '{"accel":0.5}' --labels '{"goray.io/cluster":"tags","goray.io/instance-id":"'"${INSTANCE_ID}"'","goray.io/node-type":"cpu","pool":"it'\''s a pool"}' --log-level debug` + "\n",
		"systemctl enable --now goray-node.service",
	} {
		if !strings.Contains(ud, want) {
			t.Errorf("the user data does not say %q", want)
		}
	}
	if n := strings.Count(ud, testToken); n != 1 {
		t.Errorf("the token occurs %d times in the user data; want once (the token file's write)", n)
	}
	// The order: goray checked, token written, setup, then the node.
	order := []string{"GORAY_SHA256" + `" ]; then`, "auth_token\"\n", "apt-get install", "exec /opt/goray/bin/goray start"}
	last := -1
	for _, o := range order {
		i := strings.Index(ud, o)
		if i < last {
			t.Errorf("the user data does %q out of order", o)
		}
		last = i
	}
	if m := regexp.MustCompile(`(?m)^.*goray start.*$`).FindString(ud); strings.Contains(m, testToken) {
		t.Errorf("the token is on goray start's command line: %s", m)
	}
}

// TestIdempotentLaunch: a request id launches its instances once: sent
// again (with another count), by a new provider (another process), after
// its instances were terminated, and when EC2 says it knows its client
// token (IdempotentParameterMismatch).
func TestIdempotentLaunch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	moto := mototest.Start(t)
	proxy := mototest.NewProxy(t, moto.Endpoint)
	p := open(t, proxy.URL)
	const cluster = "idem"
	for _, n := range []int{2, 2, 3} {
		if _, err := p.Launch(ctx, launchReq(t, cluster, "r1", n, testToken)); err != nil {
			t.Fatal(err)
		}
	}
	if runs, _ := proxy.Calls("RunInstances"); runs != 1 {
		t.Errorf("RunInstances was called %d times for one request id; want once", runs)
	}
	// Another process: it finds the request's instances in EC2.
	p2 := open(t, proxy.URL)
	if _, err := p2.Launch(ctx, launchReq(t, cluster, "r1", 2, testToken)); err != nil {
		t.Fatal(err)
	}
	ins := list(ctx, t, p2, cluster)
	if len(ins) != 2 {
		t.Fatalf("List: %+v; want the 2 instances of r1", ins)
	}
	if runs, _ := proxy.Calls("RunInstances"); runs != 1 {
		t.Errorf("RunInstances was called %d times; want once", runs)
	}
	// Terminated, the request still launches nothing, for any process.
	if _, err := p2.Terminate(ctx, &provider.TerminateRequest{ClusterName: cluster, InstanceIDs: []string{ins[0].ID, ins[1].ID}}); err != nil {
		t.Fatal(err)
	}
	p3 := open(t, proxy.URL)
	if _, err := p3.Launch(ctx, launchReq(t, cluster, "r1", 2, testToken)); err != nil {
		t.Fatal(err)
	}
	if l := list(ctx, t, p3, cluster); len(l) != 0 {
		t.Errorf("after its instances were terminated, request r1 sent again launched %+v", l)
	}
	// EC2 refuses a client token it ran with other parameters: the
	// request was launched (by a call whose answer was lost).
	proxy.Fail("RunInstances", "IdempotentParameterMismatch", 1)
	if _, err := p3.Launch(ctx, launchReq(t, cluster, "r2", 1, testToken)); err != nil {
		t.Fatalf("a launch EC2 answers IdempotentParameterMismatch: %v; want success (launched before)", err)
	}
	if _, err := p3.Launch(ctx, launchReq(t, cluster, "r2", 1, testToken)); err != nil {
		t.Fatal(err)
	}
	if runs, _ := proxy.Calls("RunInstances"); runs != 2 {
		t.Errorf("RunInstances was called %d times; want 2 (r1 once, r2 once)", runs)
	}
	// Different clusters, same request id: two launches, two tokens.
	if _, err := p3.Launch(ctx, launchReq(t, "idem-other", "r1", 1, testToken)); err != nil {
		t.Fatal(err)
	}
	if l := list(ctx, t, p3, "idem-other"); len(l) != 1 {
		t.Errorf("request r1 of another cluster: %+v; want 1 instance", l)
	}
	if awsprovider.ClientToken("a", "b") == awsprovider.ClientToken("a", "c") || awsprovider.ClientToken("ab", "c") == awsprovider.ClientToken("a", "bc") ||
		len(awsprovider.ClientToken(strings.Repeat("x", 300), "y")) != 64 {
		t.Error("client tokens collide or are not 64 characters")
	}
}

// TestRetries: throttling and capacity errors are retried and then
// succeed; when they last, the launch fails with the AWS error code,
// matching ErrQuotaExceeded (capacity, limits) or ErrUnavailable
// (throttling, an unreachable endpoint), and launches nothing; a refusal
// (an unknown image) is not retried; retries stop before the caller's
// deadline with EC2's error, not the deadline's.
func TestRetries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	moto := mototest.Start(t)
	proxy := mototest.NewProxy(t, moto.Endpoint)
	p := open(t, proxy.URL) // max_retries 3
	const cluster = "retries"
	n := 0
	launch := func(mod ...func(*provider.LaunchRequest)) error {
		n++
		req := launchReq(t, cluster, fmt.Sprintf("r%d", n), 1, testToken)
		for _, f := range mod {
			f(req)
		}
		_, err := p.Launch(ctx, req)
		return err
	}
	runs := func() int { c, _ := proxy.Calls("RunInstances"); return c }

	for _, code := range []string{"RequestLimitExceeded", "InsufficientInstanceCapacity", "InstanceLimitExceeded"} {
		before := runs()
		proxy.Fail("RunInstances", code, 2)
		if err := launch(); err != nil {
			t.Errorf("%s twice, then success: %v", code, err)
		}
		if got := runs() - before; got != 3 {
			t.Errorf("%s twice: RunInstances called %d times; want 3", code, got)
		}
	}
	if l := list(ctx, t, p, cluster); len(l) != 3 {
		t.Errorf("List: %d instances; want the 3 launches' (one each)", len(l))
	}

	for _, tc := range []struct {
		code string
		kind error
	}{
		{"InsufficientInstanceCapacity", provider.ErrQuotaExceeded},
		{"InstanceLimitExceeded", provider.ErrQuotaExceeded},
		{"RequestLimitExceeded", provider.ErrUnavailable},
	} {
		before := runs()
		proxy.Fail("RunInstances", tc.code, -1)
		err := launch()
		proxy.Clear()
		var ae *awsprovider.APIError
		if !errors.Is(err, tc.kind) || !errors.As(err, &ae) || ae.Code != tc.code || ae.Action != "RunInstances" || ae.Attempts != 4 {
			t.Errorf("%s on every call: %v (%#v); want %v with code %s after 4 attempts", tc.code, err, ae, tc.kind, tc.code)
		} else if !strings.Contains(err.Error(), tc.code) || !strings.Contains(err.Error(), "4 attempts") {
			t.Errorf("the error does not say the code and attempts: %v", err)
		}
		if got := runs() - before; got != 4 {
			t.Errorf("%s on every call: RunInstances called %d times; want 4 (max_retries 3)", tc.code, got)
		}
	}
	if l := list(ctx, t, p, cluster); len(l) != 3 {
		t.Errorf("failed launches launched instances: List shows %d; want 3", len(l))
	}

	// List and Terminate retry too.
	proxy.Fail("DescribeInstances", "RequestLimitExceeded", 2)
	if l := list(ctx, t, p, cluster); len(l) != 3 {
		t.Errorf("List through 2 throttled calls: %d instances; want 3", len(l))
	}
	proxy.Fail("DescribeInstances", "Throttling", -1)
	_, err := p.List(ctx, &provider.ListRequest{ClusterName: cluster})
	proxy.Clear()
	if !errors.Is(err, provider.ErrUnavailable) || !strings.Contains(err.Error(), "Throttling") {
		t.Errorf("List throttled on every call: %v; want ErrUnavailable saying Throttling", err)
	}

	// A refusal is not retried.
	before := runs()
	err = launch(func(r *provider.LaunchRequest) {
		r.NodeConfig = nodeConfig(t, map[string]any{"image_id": "ami-00000000000000000"})
	})
	var ae *awsprovider.APIError
	if !errors.Is(err, provider.ErrNotFound) || !errors.As(err, &ae) || ae.Code != "InvalidAMIID.NotFound" || ae.Attempts != 1 {
		t.Errorf("an unknown image: %v; want ErrNotFound, InvalidAMIID.NotFound, 1 attempt", err)
	}
	if got := runs() - before; got != 1 {
		t.Errorf("an unknown image: RunInstances called %d times; want once", got)
	}

	// The deadline: retries that would outlast it are not started; EC2's
	// error is the answer.
	slow := open(t, proxy.URL, func(cfg *awsprovider.Config) {
		cfg.MaxRetries, cfg.RetryInitialInterval, cfg.RetryMaxInterval = 10, 2*time.Second, 2*time.Second
	})
	proxy.Fail("RunInstances", "InsufficientInstanceCapacity", -1)
	dctx, dcancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = slow.Launch(dctx, launchReq(t, cluster, "deadline", 1, testToken))
	dcancel()
	proxy.Clear()
	if !errors.Is(err, provider.ErrQuotaExceeded) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("retries against a 3s deadline: %v; want ErrQuotaExceeded, not the deadline", err)
	}
	// A call cancelled in its backoff says so, and what EC2 said last.
	var logs syncBuffer
	slow.SetLogger(hclog.New(&hclog.LoggerOptions{Output: &logs}))
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	proxy.Fail("RunInstances", "InsufficientInstanceCapacity", -1)
	go func() {
		// Once the first attempt failed (the retry is logged before the
		// 2s wait), cancel.
		for !strings.Contains(logs.String(), "EC2 call failed; retrying") && cctx.Err() == nil {
			time.Sleep(10 * time.Millisecond) // polling interval
		}
		ccancel()
	}()
	_, err = slow.Launch(cctx, launchReq(t, cluster, "cancelled", 1, testToken))
	proxy.Clear()
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "InsufficientInstanceCapacity") {
		t.Errorf("a call cancelled in its backoff: %v; want context.Canceled, saying the last EC2 error", err)
	}

	// An endpoint nobody answers: ErrUnavailable naming it.
	gone := mototest.Start(t)
	down := open(t, gone.Endpoint, func(cfg *awsprovider.Config) { cfg.MaxRetries = 1 })
	gone.Stop()
	_, err = down.List(ctx, &provider.ListRequest{ClusterName: cluster})
	if !errors.As(err, &ae) || !errors.Is(err, provider.ErrUnavailable) || ae.Code != "" || !strings.Contains(err.Error(), "cannot reach EC2 ("+gone.Endpoint) || ae.Attempts != 2 {
		t.Errorf("an endpoint nobody answers: %v; want ErrUnavailable naming it, after 2 attempts", err)
	}
	for _, e := range []error{err} {
		if strings.Contains(e.Error(), mototest.SecretKey) {
			t.Errorf("an error shows the secret key: %v", e)
		}
	}
}

// TestBadNodeConfig: node_config values EC2 cannot take are refused
// before any call, naming the setting; values EC2 refuses come back with
// its code.
func TestBadNodeConfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	moto := mototest.Start(t)
	proxy := mototest.NewProxy(t, moto.Endpoint)
	p := open(t, proxy.URL)
	for _, tc := range []struct {
		name string
		nc   map[string]any
		kind error
		want string
	}{
		{"no instance type", map[string]any{"instance_type": nil}, provider.ErrInvalidRequest, "instance_type"},
		{"bad instance type", map[string]any{"instance_type": "huge"}, provider.ErrInvalidRequest, `instance_type "huge"`},
		{"bad image", map[string]any{"image_id": "ubuntu"}, provider.ErrInvalidRequest, `image_id "ubuntu" is not an AMI id`},
		{"bad subnet", map[string]any{"subnet_id": "net-1"}, provider.ErrInvalidRequest, `subnet_id "net-1"`},
		{"bad group", map[string]any{"security_group_ids": []string{"sg-0123456789abcdef0", "default"}}, provider.ErrInvalidRequest, `security_group_ids[1] "default"`},
		{"reserved tag", map[string]any{"tags": map[string]string{"goray-cluster-name": "x"}}, provider.ErrInvalidRequest, `key "goray-cluster-name": the goray- prefix`},
		{"aws tag", map[string]any{"tags": map[string]string{"aws:x": "y"}}, provider.ErrInvalidRequest, `key "aws:x"`},
		{"price without spot", map[string]any{"spot_max_price": "0.1"}, provider.ErrInvalidRequest, "spot_max_price is set but spot is false"},
		{"volume not GiB", map[string]any{"root_volume_size": "1500MiB"}, provider.ErrInvalidRequest, "root_volume_size 1572864000 bytes is not a whole number of GiB"},
		{"wrong type", map[string]any{"spot": "often"}, provider.ErrInvalidRequest, "spot"},
		{"unknown instance type", map[string]any{"instance_type": "zz9.mega"}, provider.ErrNotFound, "InvalidInstanceType.NotFound"},
		{"unknown image", map[string]any{"image_id": "ami-0123456789abcdef0"}, provider.ErrNotFound, "InvalidAMIID.NotFound"},
		{"unknown image, root volume", map[string]any{"image_id": "ami-0123456789abcdef0", "root_volume_size": "20GiB"}, provider.ErrNotFound, "ami-0123456789abcdef0"},
	} {
		before, _ := proxy.Calls("RunInstances")
		req := launchReq(t, "bad", "r-"+strings.ReplaceAll(tc.name, " ", "-"), 1, testToken)
		m := map[string]any{"instance_type": mototest.InstanceType, "image_id": mototest.ImageID}
		for k, v := range tc.nc {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		req.NodeConfig = b
		_, err = p.Launch(ctx, req)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %v saying %q", tc.name, err, tc.kind, tc.want)
		}
		after, _ := proxy.Calls("RunInstances")
		if tc.kind == provider.ErrInvalidRequest && !strings.HasPrefix(tc.want, "Invalid") && after != before {
			t.Errorf("%s: RunInstances was called for a node_config the provider can tell is wrong", tc.name)
		}
	}
	if l := list(ctx, t, p, "bad"); len(l) != 0 {
		t.Errorf("bad node configs launched %+v", l)
	}
	// No head address, a relative goray binary: refused.
	req := launchReq(t, "bad", "r-nohead", 1, testToken)
	req.Node.HeadAddress = ""
	if _, err := p.Launch(ctx, req); !errors.Is(err, provider.ErrInvalidRequest) {
		t.Errorf("no head address: %v", err)
	}
	req = launchReq(t, "bad", "r-relative", 1, testToken)
	req.Node.GorayBinary = "bin/goray"
	if _, err := p.Launch(ctx, req); !errors.Is(err, provider.ErrInvalidRequest) || !strings.Contains(err.Error(), "bin/goray") {
		t.Errorf("a relative goray binary: %v", err)
	}
}

// TestSpotAndRootVolume: spot instances are launched on the spot market,
// and root_volume_size sizes the image's root device.
func TestSpotAndRootVolume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	moto := mototest.Start(t)
	c := ec2Client(moto.Endpoint)
	p := open(t, moto.Endpoint)
	req := launchReq(t, "spot", "r1", 1, testToken)
	req.NodeConfig = nodeConfig(t, map[string]any{"spot": true, "spot_max_price": "0.05", "root_volume_size": "20GiB", "root_volume_type": "gp3"})
	if _, err := p.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	ins := describe(ctx, t, c, awsprovider.TagCluster, "spot")
	if len(ins) != 1 {
		t.Fatalf("%d instances", len(ins))
	}
	i := ins[0]
	if i.InstanceLifecycle != types.InstanceLifecycleTypeSpot {
		t.Errorf("instance lifecycle %q; want spot", i.InstanceLifecycle)
	}
	img, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{mototest.ImageID}})
	if err != nil || len(img.Images) != 1 {
		t.Fatalf("DescribeImages: %+v, %v", img, err)
	}
	root := aws.ToString(img.Images[0].RootDeviceName)
	vols, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: []types.Filter{{Name: aws.String("attachment.instance-id"), Values: []string{aws.ToString(i.InstanceId)}}}})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range vols.Volumes {
		for _, a := range v.Attachments {
			if aws.ToString(a.Device) == root {
				found = true
				if aws.ToInt32(v.Size) != 20 || v.VolumeType != types.VolumeTypeGp3 {
					t.Errorf("the root volume (%s) is %d GiB %s; want 20 GiB gp3", root, aws.ToInt32(v.Size), v.VolumeType)
				}
			}
		}
	}
	if !found {
		t.Errorf("no volume at the image's root device %s: %+v", root, vols.Volumes)
	}
}

// TestUnexpectedTermination: an instance EC2 (here: someone else) ends
// without goray asking is reported once by PollErrors, as a launch error
// of its request and node type with EC2's state reason, and only to its
// cluster; one goray terminated is not.
func TestUnexpectedTermination(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	moto := mototest.Start(t)
	c := ec2Client(moto.Endpoint)
	p := open(t, moto.Endpoint)
	if _, err := p.Launch(ctx, launchReq(t, "lost", "r1", 2, testToken)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Launch(ctx, launchReq(t, "lost-other", "r1", 1, testToken)); err != nil {
		t.Fatal(err)
	}
	ins := list(ctx, t, p, "lost")
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{ins[0].ID}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Terminate(ctx, &provider.TerminateRequest{ClusterName: "lost", InstanceIDs: []string{ins[1].ID}}); err != nil {
		t.Fatal(err)
	}
	pe, err := p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: "lost"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pe.Errors) != 1 {
		t.Fatalf("PollErrors: %+v; want the one instance terminated behind goray's back", pe.Errors)
	}
	e := pe.Errors[0]
	if e.Op != provider.ErrorOpLaunch || e.InstanceID != ins[0].ID || e.RequestID != "r1" || e.NodeType != "cpu" || e.Count != 1 || e.At.IsZero() ||
		!strings.Contains(e.Message, "Client.UserInitiatedShutdown") || !strings.Contains(e.Message, "without goray asking") {
		t.Errorf("the error: %+v", e)
	}
	for _, cl := range []string{"lost", "lost-other"} {
		if pe, err := p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: cl}); err != nil || len(pe.Errors) != 0 {
			t.Errorf("PollErrors of %s again: %+v, %v; want nothing", cl, pe, err)
		}
	}
	if l := list(ctx, t, p, "lost"); len(l) != 0 {
		t.Errorf("List: %+v; want nothing", l)
	}
}

// TestTerminateOtherCluster: Terminate never ends an instance without the
// cluster's tag, whatever ids it is given.
func TestTerminateOtherCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	moto := mototest.Start(t)
	c := ec2Client(moto.Endpoint)
	p := open(t, moto.Endpoint)
	if _, err := p.Launch(ctx, launchReq(t, "mine", "r1", 1, testToken)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Launch(ctx, launchReq(t, "theirs", "r1", 1, testToken)); err != nil {
		t.Fatal(err)
	}
	untagged, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(mototest.ImageID), InstanceType: mototest.InstanceType, MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	theirs := list(ctx, t, p, "theirs")[0].ID
	mine := list(ctx, t, p, "mine")[0].ID
	other := aws.ToString(untagged.Instances[0].InstanceId)
	if _, err := p.Terminate(ctx, &provider.TerminateRequest{ClusterName: "mine", InstanceIDs: []string{theirs, other, mine, "i-00000000000000000"}}); err != nil {
		t.Fatal(err)
	}
	out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{theirs, other, mine}})
	if err != nil {
		t.Fatal(err)
	}
	var all []types.Instance
	for _, r := range out.Reservations {
		all = append(all, r.Instances...)
	}
	want := map[string]string{theirs: "running", other: "running", mine: "terminated"}
	if got := states(all); !maps.Equal(got, want) {
		t.Errorf("after cluster mine terminated all three: %v; want %v", got, want)
	}
}
