package awsprovider_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/testservers/mototest"
	"github.com/goray-dev/goray/plugins/aws/awsprovider"
	"github.com/goray-dev/goray/sdk/provider"
)

// noAWSEnv keeps this machine's AWS settings out of a test.
func noAWSEnv(t *testing.T) {
	for _, k := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EC2"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
}

// TestConfigure: the config block's defaults and sensitive settings, and
// configs the provider refuses, each naming the setting; an unconfigured
// provider is unavailable and unhealthy.
func TestConfigure(t *testing.T) {
	noAWSEnv(t)
	ctx := context.Background()
	d := awsprovider.DefaultConfig()
	if d.GorayPath != "/usr/local/bin/goray" || d.InstanceDir != "/var/lib/goray" || d.MaxRetries != 5 ||
		d.RetryInitialInterval != 500*time.Millisecond || d.RetryMaxInterval != 20*time.Second {
		t.Errorf("DefaultConfig: %+v", d)
	}
	spec := awsprovider.New().ConfigSpec()
	if err := spec.Err(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"access_key", "secret_key", "session_token"} {
		if !spec.Schema().Attributes[name].Sensitive {
			t.Errorf("%s is not a sensitive setting", name)
		}
	}
	ok := testConfig("http://127.0.0.1:1")
	for _, tc := range []struct {
		name string
		mod  func(*awsprovider.Config)
		want string
	}{
		{"no region", func(c *awsprovider.Config) { c.Region = "" }, "no region: set region, or AWS_REGION"},
		{"bad endpoint", func(c *awsprovider.Config) { c.Endpoint = "127.0.0.1:5000" }, `endpoint "127.0.0.1:5000" is not an http or https URL`},
		{"secret without key", func(c *awsprovider.Config) { c.AccessKey = "" }, "access_key and secret_key go together"},
		{"token without keys", func(c *awsprovider.Config) { c.AccessKey, c.SecretKey, c.SessionToken = "", "", "tok" }, "session_token needs access_key and secret_key"},
		{"profile and keys", func(c *awsprovider.Config) { c.Profile = "p" }, "either profile or access_key"},
		{"url without sha", func(c *awsprovider.Config) { c.GoraySHA256 = "" }, "goray_url needs goray_sha256"},
		{"bad sha", func(c *awsprovider.Config) { c.GoraySHA256 = "abc" }, `goray_sha256 "abc" is not 64 hex digits`},
		{"bad url", func(c *awsprovider.Config) { c.GorayURL = "ftp://x/goray" }, `goray_url "ftp://x/goray"`},
		{"relative goray", func(c *awsprovider.Config) { c.GorayPath = "bin/goray" }, `goray_path "bin/goray"`},
		{"quoted goray", func(c *awsprovider.Config) { c.GorayPath = "/usr/bin/go ray" }, `goray_path "/usr/bin/go ray"`},
		{"long instance dir", func(c *awsprovider.Config) { c.InstanceDir = "/var/lib/goray/a/rather/long/dir" }, "use at most 27"},
		{"retries", func(c *awsprovider.Config) { c.MaxRetries = -1 }, "max_retries -1"},
		{"intervals", func(c *awsprovider.Config) { c.RetryMaxInterval = time.Millisecond }, "want 0 < initial <= max"},
	} {
		cfg := ok
		tc.mod(&cfg)
		_, err := awsprovider.Open(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), mototest.SecretKey) {
			t.Errorf("%s: the error shows the secret key: %v", tc.name, err)
		}
	}
	// The region may come from the environment; no credentials is the
	// credential chain (resolved at the first call).
	t.Setenv("AWS_REGION", "eu-west-1")
	cfg := ok
	cfg.Region, cfg.AccessKey, cfg.SecretKey = "", "", ""
	if _, err := awsprovider.Open(ctx, cfg); err != nil {
		t.Errorf("region from AWS_REGION, the credential chain: %v", err)
	}
	// Through the typed config: an empty block is the defaults.
	p := awsprovider.New()
	if err := p.Health(ctx); err == nil {
		t.Error("an unconfigured provider is healthy")
	}
	if _, err := p.List(ctx, &provider.ListRequest{ClusterName: "c"}); !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("List before Configure: %v; want ErrUnavailable", err)
	}
	if _, err := p.Launch(ctx, launchReq(t, "c", "r", 1, testToken)); !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("Launch before Configure: %v; want ErrUnavailable", err)
	}
	if err := p.ConfigSpec().Configure(ctx, map[string]any{}); err != nil {
		t.Fatalf("an empty config block with AWS_REGION set: %v", err)
	}
	if err := p.Health(ctx); err != nil {
		t.Errorf("a configured provider: %v", err)
	}
}

// syncBuffer is a bytes.Buffer a logger and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestNoSecrets: the credentials and the cluster token never reach the
// provider's log or its errors, even when EC2's messages echo them.
func TestNoSecrets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	moto := mototest.Start(t)
	proxy := mototest.NewProxy(t, moto.Endpoint)
	const ak, sk, st = "AKIATESTNOSECRETS", "no-secrets-secret-key/0123", "no-secrets-session-token-0123"
	var logs syncBuffer
	p := awsprovider.New()
	p.SetLogger(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace}))
	cfg := testConfig(proxy.URL)
	cfg.AccessKey, cfg.SecretKey, cfg.SessionToken = ak, sk, st
	if err := p.Configure(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	echo := "you sent " + ak + " " + sk + " " + st + " and " + testToken
	var errs []error
	proxy.FailWith("RunInstances", "RequestLimitExceeded", echo, 2)
	if _, err := p.Launch(ctx, launchReq(t, "secrets", "r1", 1, testToken)); err != nil {
		t.Fatalf("a launch throttled twice: %v", err)
	}
	proxy.FailWith("RunInstances", "AuthFailure", echo, 1)
	_, err := p.Launch(ctx, launchReq(t, "secrets", "r2", 1, testToken))
	errs = append(errs, err)
	proxy.FailWith("DescribeInstances", "InternalError", echo, -1)
	_, err = p.List(ctx, &provider.ListRequest{ClusterName: "secrets"})
	errs = append(errs, err)
	_, err = p.Terminate(ctx, &provider.TerminateRequest{ClusterName: "secrets", InstanceIDs: []string{"i-0123456789abcdef0"}})
	errs = append(errs, err)
	proxy.Clear()
	for i, err := range errs {
		if err == nil {
			t.Errorf("call %d: no error", i)
			continue
		}
		if !strings.Contains(err.Error(), "<redacted>") {
			t.Errorf("call %d: %v; want EC2's message with the secrets redacted", i, err)
		}
		for _, s := range []string{ak, sk, st, testToken} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("call %d: the error shows %q: %v", i, s, err)
			}
		}
	}
	log := logs.String()
	if !strings.Contains(log, "EC2 call failed; retrying") || !strings.Contains(log, "launched instances") {
		t.Errorf("the log does not show the retries and the launch:\n%s", log)
	}
	for _, s := range []string{ak, sk, st, testToken} {
		if strings.Contains(log, s) {
			t.Errorf("the log shows %q:\n%s", s, log)
		}
	}
}
