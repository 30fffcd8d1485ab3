// Package awsprovider is goray's AWS EC2 provider: its instances are EC2
// instances that download goray (checked against its sha256), write the
// cluster token to a file only root reads, run the cluster's setup
// commands and start a goray node that joins the head — all from their
// user data, run by cloud-init at first boot. Command goray-provider-aws
// serves it as a plugin.
//
// EC2 is its only durable state (a process remembers for a while what it
// launched and terminated, as EC2 shows a change only after a moment), so
// any number of provider processes (the head's, `goray down`'s, one
// restarted) agree: every instance is tagged with its
// cluster (TagCluster), node type (TagNodeType) and launch request
// (TagRequest); List is DescribeInstances filtered by the cluster's tag.
// Launch is idempotent by request id twice over: a request whose instances
// EC2 already shows (in any state, terminated included) launches nothing,
// and RunInstances carries a client token derived from the cluster and the
// request id, so EC2 itself runs a repeated call once. Terminate only
// touches instances carrying the cluster's tag, and tags them
// (TagTerminate) before it terminates them, so that PollErrors can tell
// them from instances EC2 terminated by itself (no capacity for a spot
// instance, a volume limit), which it reports as launch failures with
// EC2's state reason.
//
// Throttling, capacity and limit errors, and an endpoint that cannot be
// reached, are retried with exponential backoff (max_retries,
// retry_initial_interval, retry_max_interval; never past the caller's
// deadline), then reported as errors matching provider.ErrUnavailable
// (throttling, unreachable, credentials) or provider.ErrQuotaExceeded
// (capacity, limits), *APIError with EC2's error code. Credentials and the
// cluster token never appear in a log or an error.
package awsprovider

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/provider"
)

// Name is the provider's name: the binary is goray-provider-aws.
const Name = "aws"

// Tags every instance carries (Ray's AWS provider has ray-cluster-name,
// ray-node-type, ...). Node types may not set tags starting with
// ReservedTagPrefix.
const (
	// TagCluster holds the cluster's name: List and Terminate see only
	// the instances carrying the cluster's.
	TagCluster = "goray-cluster-name"
	// TagNodeType holds the node type's name.
	TagNodeType = "goray-node-type"
	// TagRequest holds the id of the launch request that made the
	// instance.
	TagRequest = "goray-launch-request"
	// TagTerminate is set (to the terminate request's id) on an instance
	// before the provider terminates it.
	TagTerminate = "goray-terminate-request"
	// TagName is EC2's display name: goray-<cluster>-<node type> unless a
	// node type's tags set it.
	TagName = "Name"
	// ReservedTagPrefix starts the tags the provider sets itself.
	ReservedTagPrefix = "goray-"
)

// Config is the provider's config block:
//
//	provider "aws" {
//	  config {
//	    region       = "us-west-2"
//	    goray_url    = "https://example.com/goray-v1.2.3-linux-amd64"
//	    goray_sha256 = "<64 hex digits>"
//	  }
//	}
type Config struct {
	// Region is the AWS region.
	Region string `hcl:"region" doc:"AWS region of the instances (required unless the AWS environment sets one: AWS_REGION, or the profile's region)."`
	// Endpoint is the EC2 API's URL, when not AWS's.
	Endpoint string `hcl:"endpoint" doc:"URL of the EC2 API, for an EC2-compatible API or emulator such as moto (default: AWS's endpoint of the region)."`
	// Profile names a profile of the shared AWS config files.
	Profile string `hcl:"profile" doc:"Profile of the shared AWS config and credentials files (~/.aws) to use (default: AWS_PROFILE, else default)."`
	// AccessKey, SecretKey and SessionToken are static credentials.
	AccessKey string `hcl:"access_key,sensitive" doc:"Access key id; with secret_key. Default: the AWS credential chain (environment, shared files, SSO, the instance's or container's role)."`
	// SecretKey is the secret of AccessKey.
	SecretKey string `hcl:"secret_key,sensitive" doc:"Secret access key; with access_key."`
	// SessionToken is the session token of temporary credentials.
	SessionToken string `hcl:"session_token,sensitive" doc:"Session token of temporary credentials; with access_key and secret_key."`
	// GorayURL is where instances download goray.
	GorayURL string `hcl:"goray_url" doc:"http(s) URL instances download the goray binary from when the file at goray_path does not have goray_sha256 (required with it). Empty: the image has goray at goray_path."`
	// GoraySHA256 is the sha256 of the goray binary instances run.
	GoraySHA256 string `hcl:"goray_sha256" doc:"sha256 (64 hex digits) of the goray binary: a download is checked against it before it runs, and an instance whose goray_path has it downloads nothing."`
	// GorayPath is where goray lives on the instances.
	GorayPath string `hcl:"goray_path" default:"/usr/local/bin/goray" doc:"Path of the goray binary on the instances."`
	// InstanceDir holds the node's files on the instances.
	InstanceDir string `hcl:"instance_dir" default:"/var/lib/goray" doc:"Directory of the node's files on the instances (root only): the cluster token, the start script, the node's temp dir (t). At most 27 bytes: the node's unix sockets live under it."`
	// MaxRetries bounds the retries of a throttled or refused EC2 call.
	MaxRetries int `hcl:"max_retries" default:"5" doc:"How many times an EC2 call that was throttled, found no capacity, hit a limit or could not reach the endpoint is retried (with exponential backoff, and never past the caller's deadline) before the error is reported."`
	// RetryInitialInterval is the first wait between retries.
	RetryInitialInterval time.Duration `hcl:"retry_initial_interval" default:"500ms" doc:"First wait before a retry; it doubles (with jitter) up to retry_max_interval."`
	// RetryMaxInterval bounds the wait between retries.
	RetryMaxInterval time.Duration `hcl:"retry_max_interval" default:"20s" doc:"Longest wait between retries."`
}

// NodeConfig is a node type's node_config block.
type NodeConfig struct {
	// InstanceType is the EC2 instance type.
	InstanceType string `hcl:"instance_type,required" doc:"EC2 instance type, e.g. m7i.xlarge."`
	// ImageID is the AMI.
	ImageID string `hcl:"image_id,required" doc:"AMI id (ami-...) of a Linux image with cloud-init, curl and sha256sum (Amazon Linux, Ubuntu, Debian)."`
	// SubnetID is the subnet (and so the VPC and availability zone).
	SubnetID string `hcl:"subnet_id" doc:"Subnet id (subnet-...) of the instances; default: the default VPC's subnet EC2 picks. It must reach the head's address."`
	// SecurityGroupIDs are the instances' security groups.
	SecurityGroupIDs []string `hcl:"security_group_ids" doc:"Security group ids (sg-...); default: the VPC's default group. They must let the nodes reach each other and the head."`
	// IAMInstanceProfile is the instances' instance profile.
	IAMInstanceProfile string `hcl:"iam_instance_profile" doc:"IAM instance profile of the instances, by name or ARN (the role tasks run with)."`
	// KeyName is an EC2 key pair for SSH.
	KeyName string `hcl:"key_name" doc:"EC2 key pair for SSH access (default: none)."`
	// Spot launches spot instances.
	Spot bool `hcl:"spot" default:"false" doc:"Launch spot instances (one-time; terminated when interrupted)."`
	// SpotMaxPrice caps the spot price.
	SpotMaxPrice string `hcl:"spot_max_price" doc:"Highest hourly price for spot instances, in USD such as \"0.25\" (default: the on-demand price)."`
	// RootVolumeSize is the root volume's size.
	RootVolumeSize int64 `hcl:"root_volume_size,size" doc:"Size of the root EBS volume, whole GiB such as \"100GiB\" (default: the image's)."`
	// RootVolumeType is the root volume's type.
	RootVolumeType string `hcl:"root_volume_type" default:"gp3" doc:"EBS type of the root volume when root_volume_size is set."`
	// Tags are extra instance and volume tags.
	Tags map[string]string `hcl:"tags" doc:"Extra tags of the instances and their volumes (not aws:... or goray-...; Name replaces goray-<cluster>-<node type>)."`
	// ExtraArgs are further goray start flags.
	ExtraArgs []string `hcl:"extra_args" doc:"Further flags for goray start, e.g. [\"--log-level\", \"debug\"]."`
}

// Provider is the AWS provider. Create it with New and configure it
// (Configure, or Open) before use. Methods may be called concurrently.
type Provider struct {
	mu  sync.Mutex // guards the fields below
	log hclog.Logger
	cfg *settings
	// requests serialises launches of one request id (key: cluster and
	// request id).
	requests map[string]*requestLock
	// launched holds the requests this process launched or found
	// launched, by key, with when.
	launched map[string]time.Time
	// recent are the instances this process launched that DescribeInstances
	// has not shown yet (EC2 is eventually consistent), by id.
	recent map[string]*recentInstance
	// terminated holds the instances this process terminated, by id.
	terminated map[string]time.Time
	// reported holds the instances whose termination PollErrors reported.
	reported map[string]time.Time
	// tokens are the clusters' tokens, to redact from errors.
	tokens map[string]string
	// rootDevices caches the images' root device names.
	rootDevices map[string]string
}

// settings is a validated Config with its EC2 client.
type settings struct {
	ec2         *ec2.Client
	region      string
	endpoint    string // "" is AWS's
	secrets     []string
	gorayURL    string
	goraySHA256 string
	gorayPath   string
	instanceDir string
	retry       retryPolicy
}

// New returns an unconfigured Provider.
func New() *Provider {
	return &Provider{
		log:         hclog.NewNullLogger(),
		requests:    map[string]*requestLock{},
		launched:    map[string]time.Time{},
		recent:      map[string]*recentInstance{},
		terminated:  map[string]time.Time{},
		reported:    map[string]time.Time{},
		tokens:      map[string]string{},
		rootDevices: map[string]string{},
	}
}

// DefaultConfig returns the config of an empty config block: every
// setting at its default.
func DefaultConfig() Config {
	cfg, err := plugin.DecodeConfig[Config](map[string]any{})
	if err != nil {
		panic(fmt.Sprintf("awsprovider: the defaults of Config: %v", err)) // a bad tag: caught by every test
	}
	return cfg
}

// Open returns a Provider configured with cfg, as Configure would (start
// from DefaultConfig: zero fields take no default here).
func Open(ctx context.Context, cfg Config) (*Provider, error) {
	p := New()
	if err := p.Configure(ctx, cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// Name implements provider.Named.
func (p *Provider) Name() string { return Name }

// SetLogger implements plugin.LoggerSetter.
func (p *Provider) SetLogger(l hclog.Logger) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = l
}

// logger returns the current logger.
func (p *Provider) logger() hclog.Logger {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log
}

// ConfigSpec implements plugin.Configurable: the block is Config.
func (p *Provider) ConfigSpec() plugin.ConfigSpec { return plugin.TypedConfig(p.Configure) }

// Configure checks cfg and builds the EC2 client. It calls no AWS API:
// credentials are resolved at the first call. It may be called again
// (the host does after every restart of the plugin).
func (p *Provider) Configure(ctx context.Context, cfg Config) error {
	s, err := newSettings(ctx, cfg)
	if err != nil {
		return err
	}
	creds := "the AWS credential chain"
	switch {
	case cfg.AccessKey != "":
		creds = "the config's access_key"
	case cfg.Profile != "":
		creds = fmt.Sprintf("profile %q", cfg.Profile)
	}
	p.mu.Lock()
	p.cfg = s
	log := p.log
	p.mu.Unlock()
	log.Info("configured", "region", s.region, "endpoint", orDefault(s.endpoint, "AWS"), "credentials", creds,
		"goray_url", s.gorayURL, "goray_path", s.gorayPath)
	return nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

var (
	// safePath is what goray_path and instance_dir may hold: they are
	// written into the user data's shell script unquoted.
	safePath  = regexp.MustCompile(`^/[A-Za-z0-9/._+-]*$`)
	sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// maxInstanceDir bounds instance_dir: the node's unix sockets live at
// <instance_dir>/t/session_<date>_<pid>/sockets/worker-<16 hex>.sock,
// about 80 bytes more, and socket paths must stay within 107 bytes.
const maxInstanceDir = 107 - 80

func newSettings(ctx context.Context, cfg Config) (*settings, error) {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("endpoint %q is not an http or https URL", cfg.Endpoint)
		}
	}
	switch {
	case (cfg.AccessKey == "") != (cfg.SecretKey == ""):
		bad("access_key and secret_key go together: set both or neither")
	case cfg.SessionToken != "" && cfg.AccessKey == "":
		bad("session_token needs access_key and secret_key")
	case cfg.AccessKey != "" && cfg.Profile != "":
		bad("set either profile or access_key and secret_key, not both")
	}
	sha := strings.ToLower(cfg.GoraySHA256)
	if sha != "" && !sha256Hex.MatchString(sha) {
		bad("goray_sha256 %q is not 64 hex digits", cfg.GoraySHA256)
	}
	if cfg.GorayURL != "" {
		u, err := url.Parse(cfg.GorayURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("goray_url %q is not an http or https URL", cfg.GorayURL)
		}
		if sha == "" {
			bad("goray_url needs goray_sha256: instances check the download against it before they run it")
		}
	}
	if !safePath.MatchString(cfg.GorayPath) || strings.Contains(cfg.GorayPath, "..") || strings.HasSuffix(cfg.GorayPath, "/") {
		bad("goray_path %q is not an absolute file path of letters, digits and /._+-", cfg.GorayPath)
	}
	switch {
	case !safePath.MatchString(cfg.InstanceDir) || strings.Contains(cfg.InstanceDir, "..") || cfg.InstanceDir == "/":
		bad("instance_dir %q is not an absolute directory path of letters, digits and /._+-", cfg.InstanceDir)
	case len(cfg.InstanceDir) > maxInstanceDir:
		bad("instance_dir %q is %d bytes long; the node's unix sockets live under it and their paths must stay within 107 bytes, so use at most %d", cfg.InstanceDir, len(cfg.InstanceDir), maxInstanceDir)
	}
	if cfg.MaxRetries < 0 || cfg.MaxRetries > 100 {
		bad("max_retries %d is not between 0 and 100", cfg.MaxRetries)
	}
	if cfg.RetryInitialInterval <= 0 || cfg.RetryMaxInterval < cfg.RetryInitialInterval {
		bad("retry_initial_interval %s and retry_max_interval %s: want 0 < initial <= max", cfg.RetryInitialInterval, cfg.RetryMaxInterval)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("the aws provider's config: %s", strings.Join(errs, "; "))
	}
	opts := []func(*awsconfig.LoadOptions) error{
		// Retries are ours (retry.go): one policy, errors classified once.
		awsconfig.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
	}
	if cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.Region))
	}
	if cfg.Profile != "" {
		opts = append(opts, awsconfig.WithSharedConfigProfile(cfg.Profile))
	}
	if cfg.AccessKey != "" {
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)))
	}
	secrets := []string{cfg.AccessKey, cfg.SecretKey, cfg.SessionToken}
	ac, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("the aws provider's config: loading the AWS settings: %s", redact(err.Error(), secrets))
	}
	if ac.Region == "" {
		return nil, errors.New("the aws provider's config: no region: set region, or AWS_REGION in the environment of the head (and of goray down)")
	}
	client := ec2.NewFromConfig(ac, func(o *ec2.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	return &settings{
		ec2: client, region: ac.Region, endpoint: cfg.Endpoint, secrets: secrets,
		gorayURL: cfg.GorayURL, goraySHA256: sha, gorayPath: cfg.GorayPath, instanceDir: strings.TrimSuffix(cfg.InstanceDir, "/"),
		retry: retryPolicy{maxRetries: cfg.MaxRetries, initial: cfg.RetryInitialInterval, max: cfg.RetryMaxInterval},
	}, nil
}

// caller returns the caller of a request of cluster: the settings, the
// logger and the secrets to redact, the credentials and the cluster's
// token (token, when given, is remembered as the cluster's). Before
// Configure it fails with ErrUnavailable.
func (p *Provider) caller(cluster, token string) (caller, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg == nil {
		return caller{}, fmt.Errorf("%w: the aws provider is not configured yet", provider.ErrUnavailable)
	}
	if token != "" {
		p.tokens[cluster] = token
	} else {
		token = p.tokens[cluster]
	}
	return caller{s: p.cfg, log: p.log, secrets: append(slices.Clone(p.cfg.secrets), token)}, nil
}

// Health implements plugin.HealthChecker: the provider is configured. It
// does not call AWS: restarting the plugin cannot help an unreachable API.
func (p *Provider) Health(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg == nil {
		return errors.New("the aws provider is not configured yet")
	}
	return nil
}

// NodeConfigSchema implements provider.Provider: the block is NodeConfig.
func (p *Provider) NodeConfigSchema(ctx context.Context, _ *provider.NodeConfigSchemaRequest) (*provider.NodeConfigSchemaResponse, error) {
	return provider.NodeConfigSchemaOf[NodeConfig](ctx)
}

var (
	_ provider.Provider    = (*Provider)(nil)
	_ provider.Named       = (*Provider)(nil)
	_ plugin.Configurable  = (*Provider)(nil)
	_ plugin.LoggerSetter  = (*Provider)(nil)
	_ plugin.HealthChecker = (*Provider)(nil)
)
