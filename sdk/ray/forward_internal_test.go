package ray

import (
	"slices"
	"strings"
	"testing"
)

// TestForwardedEnv: a job carries only the variables ForwardEnv names,
// exactly or by a prefix ending in "*" (which never matches the runtime's
// GORAY_ variables), never the rest of the driver's environment.
func TestForwardedEnv(t *testing.T) {
	environ := []string{
		"AWS_SECRET_ACCESS_KEY=hunter2", "AWS_REGION=eu-west-1", "HOME=/root",
		"MYAPP_A=1", "MYAPP_B=x=y", "MYAPPX=no", "GORAY_AUTH_TOKEN=t", "GORAY_ADDRESS=h:1",
	}
	for _, tc := range []struct {
		patterns []string
		want     []string
	}{
		{nil, nil},
		{[]string{"AWS_REGION"}, []string{"AWS_REGION=eu-west-1"}},
		{[]string{"MYAPP_*"}, []string{"MYAPP_A=1", "MYAPP_B=x=y"}},
		{[]string{"*"}, []string{"AWS_SECRET_ACCESS_KEY=hunter2", "AWS_REGION=eu-west-1", "HOME=/root", "MYAPP_A=1", "MYAPP_B=x=y", "MYAPPX=no"}},
		{[]string{"GORAY_*"}, nil},
		{[]string{"GORAY_ADDRESS", "NOT_SET"}, []string{"GORAY_ADDRESS=h:1"}},
	} {
		if got := forwardedEnv(environ, tc.patterns); !slices.Equal(got, tc.want) {
			t.Errorf("forwardedEnv(%q) = %q, want %q", tc.patterns, got, tc.want)
		}
	}
}

func TestForwardPatterns(t *testing.T) {
	got, err := forwardPatterns([]string{"A", "B_*"}, " C , D_*,,")
	if err != nil || !slices.Equal(got, []string{"A", "B_*", "C", "D_*"}) {
		t.Fatalf("forwardPatterns = %q, %v", got, err)
	}
	for _, bad := range []string{"", "A=B", "*A", "A*B*"} {
		if _, err := forwardPatterns([]string{bad}, ""); err == nil || !strings.Contains(err.Error(), "ForwardEnv") {
			t.Errorf("ForwardEnv(%q): %v, want an error naming ForwardEnv", bad, err)
		}
	}
	if _, err := forwardPatterns(nil, "OK,BAD=1"); err == nil || !strings.Contains(err.Error(), EnvForwardEnv) {
		t.Errorf("bad $%s: %v", EnvForwardEnv, err)
	}
}

// TestJobInfoCarriesNoEnvironment: the job a driver registers names its
// binary's sha256 and carries only forwarded variables plus the runtime's
// own (extraEnv).
func TestJobInfoCarriesNoEnvironment(t *testing.T) {
	t.Setenv("GORAY_TEST_SECRET", "s3cret")
	t.Setenv("RAY_TEST_SECRET_KEY", "s3cret")
	t.Setenv("RAY_TEST_FWD", "yes")
	job, err := jobInfo([]string{"RAY_TEST_FWD"}, envTransferTimeout+"=5s")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"RAY_TEST_FWD=yes", envTransferTimeout + "=5s"}; !slices.Equal(job.GetEnv(), want) {
		t.Errorf("job env = %q, want %q", job.GetEnv(), want)
	}
	if len(job.GetBinarySha256()) != 64 || job.GetBinaryPath() == "" {
		t.Errorf("job binary %q sha256 %q", job.GetBinaryPath(), job.GetBinarySha256())
	}
}
