package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/goray-dev/goray/internal/testservers/mototest"
)

// The AWS provider end to end: `goray up` of a cluster whose provider is
// goray-provider-aws, against the EC2 API of moto's server on loopback.
// Emulated instances never boot, so no node ever joins: what is checked is
// what the autoscaler and goray down do with EC2's instances.

// awsStatusJSON is the part of `goray status --json` this test reads.
type awsStatusJSON struct {
	Autoscaler *struct {
		At       time.Time `json:"at"`
		Failures []struct {
			NodeType string `json:"node_type"`
			Message  string `json:"message"`
		} `json:"failures"`
		BackingOff map[string]time.Time `json:"backing_off"`
	} `json:"autoscaler"`
}

// ec2Instances returns every instance EC2 shows with goray's cluster tag
// cluster, by id, with its state and tags.
func ec2Instances(t *testing.T, ctx context.Context, c *ec2.Client, cluster string) map[string]types.Instance {
	t.Helper()
	out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: aws.String("tag:goray-cluster-name"), Values: []string{cluster}},
	}})
	if err != nil {
		t.Fatalf("DescribeInstances of cluster %q: %v", cluster, err)
	}
	m := map[string]types.Instance{}
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			m[aws.ToString(i.InstanceId)] = i
		}
	}
	return m
}

func ec2Tag(i types.Instance, key string) string {
	for _, t := range i.Tags {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

// TestAWSInstallTimeoutAndDown: `goray up` of a cluster on the AWS
// provider (moto's EC2) with min_workers = 1 and install_timeout = "3s"
// launches an instance tagged with the cluster, node type and launch
// request; it never joins (emulated instances do not boot), so after the
// install timeout the autoscaler terminates it through the provider and
// counts a failure, which `goray status` shows with the node type backing
// off. `goray down` then terminates every instance of the cluster and
// none of another cluster's.
func TestAWSInstallTimeoutAndDown(t *testing.T) {
	ctx := asCtx(t)
	moto := mototest.Start(t)
	ec2c := ec2.NewFromConfig(mototest.AWSConfig(moto.Endpoint))
	const cluster, otherCluster = "aws-accept", "aws-other"
	// Another cluster's instance, launched directly: goray must not touch it.
	run, err := ec2c.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String(mototest.ImageID), InstanceType: mototest.InstanceType, MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: []types.Tag{
			{Key: aws.String("goray-cluster-name"), Value: aws.String(otherCluster)},
			{Key: aws.String("goray-node-type"), Value: aws.String("cpu")},
			{Key: aws.String("goray-launch-request"), Value: aws.String("req-other")},
		}}},
	})
	if err != nil {
		t.Fatalf("launching the other cluster's instance: %v", err)
	}
	otherID := aws.ToString(run.Instances[0].InstanceId)

	dir := shortTempDir(t)
	tempDir := filepath.Join(dir, "h")
	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	file := filepath.Join(dir, "cluster.hcl")
	src := fmt.Sprintf(`
cluster_name    = %q
head_node_type  = "head"
max_workers     = 1
install_timeout = "3s"
temp_dir        = %q
plugin_dir      = %q

provider "aws" {
  config {
    region                 = %q
    endpoint               = %q
    access_key             = %q
    secret_key             = %q
    goray_url              = "https://downloads.invalid/goray"
    goray_sha256           = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    max_retries            = 2
    retry_initial_interval = "50ms"
  }
}

node_type "head" {
  resources = { CPU = 1 }
}

node_type "cpu" {
  resources   = { CPU = 2 }
  min_workers = 1
  max_workers = 1
  node_config {
    instance_type = %q
    image_id      = %q
    tags          = { purpose = "acceptance" }
  }
}
`, cluster, tempDir, pluginDir, mototest.Region, moto.Endpoint, mototest.AccessKey, mototest.SecretKey, mototest.InstanceType, mototest.ImageID)
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"GORAY_AUTOSCALER_INTERVAL=300ms"}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if r := runGorayEnv(t, ctx, env, "down", file); r.code != 0 {
			t.Logf("cleanup: goray down: %s", r)
		}
		runGoray(t, ctx, "stop", "--temp-dir", tempDir, "--force")
		for _, p := range findProcs(func(p proc) bool { return p.mentions(dir) }) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	r := runGorayEnv(t, ctx, env, "up", "--port", strconv.Itoa(port), file)
	if r.code != 0 {
		t.Fatalf("goray up: %s", r)
	}
	wantLines(t, r.stdout, "Started goray head node", fmt.Sprintf("Cluster %q: provider \"aws\"", cluster))
	session := ""
	for _, l := range strings.Split(r.stdout, "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(l), "session dir:"); ok {
			session = strings.TrimSpace(s)
		}
	}
	headLog := func() string {
		b, _ := os.ReadFile(filepath.Join(session, "logs", "node.log"))
		return string(b)
	}

	// min_workers: an instance of the cluster, tagged.
	var first string
	waitFor(t, 30*time.Second, "the autoscaler to launch the min worker on EC2", func() bool {
		for id, i := range ec2Instances(t, ctx, ec2c, cluster) {
			first = id
			if ec2Tag(i, "goray-node-type") != "cpu" || !strings.HasPrefix(ec2Tag(i, "goray-launch-request"), "req-") || ec2Tag(i, "purpose") != "acceptance" {
				t.Fatalf("instance %s has tags %+v", id, i.Tags)
			}
			return true
		}
		return false
	})
	// It never joins: terminated by the autoscaler (through the provider,
	// which tags what it terminates) after the install timeout.
	waitFor(t, 60*time.Second, "the instance that never joined to be terminated", func() bool {
		i := ec2Instances(t, ctx, ec2c, cluster)[first]
		return i.State.Name == types.InstanceStateNameTerminated && ec2Tag(i, "goray-terminate-request") != ""
	})
	var st awsStatusJSON
	waitFor(t, 30*time.Second, "goray status to show the failure and the backoff", func() bool {
		r := runGoray(t, ctx, "status", "--json", "--address", addr)
		if r.code != 0 {
			return false
		}
		st = awsStatusJSON{}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("goray status --json: %v\n%s", err, r)
		}
		if st.Autoscaler == nil || st.Autoscaler.BackingOff["cpu"].IsZero() {
			return false
		}
		for _, f := range st.Autoscaler.Failures {
			if f.NodeType == "cpu" && strings.Contains(f.Message, first) && strings.Contains(f.Message, "never joined") {
				return true
			}
		}
		return false
	})
	if log := headLog(); !strings.Contains(log, "launching instances") || !strings.Contains(log, first) {
		t.Errorf("the head's log does not show the launch and the instance:\n%s", log)
	}

	// goray down: every instance of the cluster, and nothing else.
	r = runGorayEnv(t, ctx, env, "down", file)
	if r.code != 0 {
		t.Fatalf("goray down: %s", r)
	}
	wantLines(t, r.stdout, fmt.Sprintf("Stopped the head of cluster %q", cluster))
	if !strings.Contains(r.stdout, fmt.Sprintf("All instances of cluster %q are terminated.", cluster)) &&
		!strings.Contains(r.stdout, fmt.Sprintf("Cluster %q has no instances.", cluster)) {
		t.Errorf("goray down does not say the cluster's instances are gone:\n%s", r)
	}
	mine := ec2Instances(t, ctx, ec2c, cluster)
	if len(mine) == 0 {
		t.Fatal("EC2 shows no instance of the cluster")
	}
	for id, i := range mine {
		if i.State.Name != types.InstanceStateNameTerminated {
			t.Errorf("after goray down, instance %s of the cluster is %s", id, i.State.Name)
		}
	}
	others := ec2Instances(t, ctx, ec2c, otherCluster)
	if i, ok := others[otherID]; !ok || i.State.Name != types.InstanceStateNameRunning || ec2Tag(i, "goray-terminate-request") != "" {
		t.Errorf("the other cluster's instance %s after goray down: %+v; want it running, untouched", otherID, i.State)
	}
	waitNoProcs(t, 10*time.Second, "processes of the cluster", func(p proc) bool { return p.mentions(dir) })
}
