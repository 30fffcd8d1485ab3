package mototest

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
)

// TestServerAndProxy: the server answers EC2 calls, validates image ids,
// the proxy fails the calls it is told to with EC2's error codes and
// passes the others, and the server is gone after the test's cleanup.
func TestServerAndProxy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var s *Server
	var pid int
	t.Run("server", func(t *testing.T) {
		s = Start(t)
		pid = s.Pid()
		c := ec2.NewFromConfig(AWSConfig(s.Endpoint))
		out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(ImageID), InstanceType: InstanceType,
			MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
		if err != nil {
			t.Fatalf("RunInstances: %v\n%s", err, s.Log())
		}
		if len(out.Instances) != 1 || !strings.HasPrefix(aws.ToString(out.Instances[0].InstanceId), "i-") {
			t.Fatalf("RunInstances: %+v", out.Instances)
		}
		_, err = c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String("ami-00000000"), InstanceType: InstanceType,
			MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "InvalidAMIID.NotFound" {
			t.Errorf("RunInstances of an unknown image: %v; want InvalidAMIID.NotFound", err)
		}

		p := NewProxy(t, s.Endpoint)
		var hooked []string
		p.After("DescribeInstances", func(form url.Values, body []byte) { hooked = append(hooked, form.Get("Action")) })
		p.Fail("DescribeInstances", "RequestLimitExceeded", 2)
		pc := ec2.NewFromConfig(AWSConfig(p.URL))
		for i := range 2 {
			_, err := pc.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
			var ae smithy.APIError
			if !errors.As(err, &ae) || ae.ErrorCode() != "RequestLimitExceeded" {
				t.Fatalf("call %d through the proxy: %v; want RequestLimitExceeded", i+1, err)
			}
		}
		d, err := pc.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
		if err != nil || len(d.Reservations) != 1 {
			t.Fatalf("the third call through the proxy: %+v, %v; want the one reservation", d, err)
		}
		if calls, failed := p.Calls("DescribeInstances"); calls != 3 || failed != 2 {
			t.Errorf("Calls: %d, %d failed; want 3, 2 failed", calls, failed)
		}
		if len(hooked) != 1 {
			t.Errorf("the After hook ran %d times; want once (after the call that succeeded)", len(hooked))
		}
		if err := s.Reset(ctx); err != nil {
			t.Fatal(err)
		}
		if d, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil || len(d.Reservations) != 0 {
			t.Errorf("after Reset: %+v, %v; want nothing", d, err)
		}
	})
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the server process %d outlived its test: %v", pid, err)
	}
	if resp, err := http.Get(s.Endpoint + "/moto-api/data.json"); err == nil {
		resp.Body.Close()
		t.Error("the server answers after its test ended")
	}
}
