package awsprovider

import (
	"errors"
	"net/http"
	"testing"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/goray-dev/goray/sdk/provider"
)

// TestClassify: EC2's error codes map to the provider errors and retries
// the package doc promises.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		code   string
		status int
		retry  bool
		kind   error
	}{
		{"RequestLimitExceeded", 503, true, provider.ErrUnavailable},
		{"Throttling", 400, true, provider.ErrUnavailable},
		{"InsufficientInstanceCapacity", 500, true, provider.ErrQuotaExceeded},
		{"InstanceLimitExceeded", 400, true, provider.ErrQuotaExceeded},
		{"VcpuLimitExceeded", 400, true, provider.ErrQuotaExceeded},
		{"InsufficientSomethingNew", 400, true, provider.ErrQuotaExceeded},
		{"InternalError", 500, true, provider.ErrUnavailable},
		{"SomethingNew", 503, true, provider.ErrUnavailable},
		{"UnauthorizedOperation", 403, false, provider.ErrUnavailable},
		{"AuthFailure", 401, false, provider.ErrUnavailable},
		{"InvalidAMIID.NotFound", 400, false, provider.ErrNotFound},
		{"InvalidSubnetID.NotFound", 400, false, provider.ErrNotFound},
		{"InvalidAMIID.Unavailable", 400, false, provider.ErrNotFound},
		{"NoSuchEntity", 400, false, provider.ErrNotFound},
		{"InvalidParameterValue", 400, false, provider.ErrInvalidRequest},
		{"IdempotentParameterMismatch", 400, false, provider.ErrInvalidRequest},
	} {
		err := &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: tc.status}},
			Err: &smithy.GenericAPIError{Code: tc.code, Message: "m"}}
		c, code, msg := classify(err)
		if c.retry != tc.retry || c.kind != tc.kind || code != tc.code || msg != "m" {
			t.Errorf("%s (%d): retry %v, %v, %q, %q; want retry %v, %v", tc.code, tc.status, c.retry, c.kind, code, msg, tc.retry, tc.kind)
		}
	}
	c, code, _ := classify(errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
	if !c.retry || c.kind != provider.ErrUnavailable || code != "" {
		t.Errorf("a transport error: %+v, %q", c, code)
	}
}

// TestAPIErrorRedacts: an APIError shows the action, code, message and
// attempts, matches its provider error, and never shows a secret.
func TestAPIErrorRedacts(t *testing.T) {
	cl := caller{s: &settings{region: "us-east-1", endpoint: "http://127.0.0.1:1"}, secrets: []string{"AKIAEXAMPLE", "s3cr3t/key", "", "the-cluster-token"}}
	err := apiError(cl, "RunInstances", &smithy.GenericAPIError{Code: "AuthFailure", Message: "key AKIAEXAMPLE with s3cr3t/key for the-cluster-token"}, 3)
	want := "provider unavailable: EC2 RunInstances: AuthFailure: key <redacted> with <redacted> for <redacted> (3 attempts)"
	if err.Error() != want || !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("got %q; want %q", err, want)
	}
	err = apiError(cl, "DescribeInstances", errors.New("connection refused"), 1)
	if want := "provider unavailable: EC2 DescribeInstances: cannot reach EC2 (http://127.0.0.1:1, region us-east-1): connection refused"; err.Error() != want {
		t.Errorf("got %q; want %q", err, want)
	}
}
