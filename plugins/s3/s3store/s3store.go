package s3store

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/storage"
)

// Limits and defaults of the config.
const (
	// MinPartSize is S3's smallest part of a multipart upload (but the last).
	MinPartSize = 5 << 20
	// MaxPartSize is S3's largest part.
	MaxPartSize = 5 << 30
	// maxParts is S3's most parts in one upload.
	maxParts = 10000
	// DefaultPartSize is the default part_size.
	DefaultPartSize = 16 << 20
	// DefaultConcurrency is the default concurrency.
	DefaultConcurrency = 4
	// DefaultTimeout is the default timeout.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxRetries is the default max_retries.
	DefaultMaxRetries = 3
	// smallObject is the size up to which a write buffers its object in a
	// buffer of its own, outside the shared pool of part buffers.
	smallObject = 1 << 20
)

// Store is the S3 storage. Create it with New and configure it before use.
// Methods may be called concurrently.
type Store struct {
	mu  sync.RWMutex
	cfg *config // nil until configured
	log hclog.Logger

	abortMu sync.Mutex
	aborts  []pendingAbort // uploads whose abort failed, retried by Health
}

// config is a configured client and its settings.
type config struct {
	client      *minio.Client
	core        minio.Core
	bucket      string
	prefix      string // "" or ending in "/"
	endpoint    string
	accessKeyID string // for messages, never the secret
	partSize    int64
	concurrency int
	timeout     time.Duration
	// parts bounds the part buffers in use by all writes together.
	parts chan struct{}
	pool  *sync.Pool // of *[]byte of partSize bytes
}

type pendingAbort struct {
	object, uploadID string
}

// New returns an unconfigured Store.
func New() *Store { return &Store{log: hclog.NewNullLogger()} }

// Open returns a Store configured with cfg, a config block's attributes as
// Go values ({"bucket": "b", "part_size": "8MiB", ...}); absent attributes
// take their defaults, as in a plugin.
func Open(ctx context.Context, cfg map[string]any) (*Store, error) {
	s := New()
	c, err := plugin.DecodeConfig[Config](cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Configure(ctx, c); err != nil {
		return nil, err
	}
	return s, nil
}

// SetLogger implements plugin.LoggerSetter.
func (s *Store) SetLogger(l hclog.Logger) {
	s.mu.Lock()
	s.log = l
	s.mu.Unlock()
}

func (s *Store) logger() hclog.Logger {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.log
}

// Config is the plugin's `config { ... }` block.
type Config struct {
	Endpoint           string        `hcl:"endpoint" doc:"S3 endpoint as host:port (\"127.0.0.1:9000\" for a MinIO); empty is $AWS_ENDPOINT_URL_S3 or $AWS_ENDPOINT_URL (a URL whose scheme sets tls), else AWS S3."`
	Bucket             string        `hcl:"bucket,required" doc:"Bucket the objects are stored in."`
	Prefix             string        `hcl:"prefix" doc:"Key prefix inside the bucket (\"goray/spill\"); empty is the bucket's root."`
	Region             string        `hcl:"region" doc:"Region of the bucket; empty asks the endpoint."`
	AccessKey          string        `hcl:"access_key" doc:"Access key id; empty uses the AWS chain: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, ~/.aws/credentials (AWS_PROFILE), then the instance's IAM role."`
	SecretKey          string        `hcl:"secret_key,sensitive" doc:"Secret access key (with access_key)."`
	SessionToken       string        `hcl:"session_token,sensitive" doc:"Session token of temporary credentials (with access_key)."`
	TLS                bool          `hcl:"tls" default:"true" doc:"Use HTTPS (an endpoint from $AWS_ENDPOINT_URL follows its URL's scheme instead)."`
	InsecureSkipVerify bool          `hcl:"insecure_skip_verify" default:"false" doc:"Accept any TLS certificate (tests only)."`
	CreateBucket       bool          `hcl:"create_bucket" default:"false" doc:"Create the bucket if it does not exist."`
	PartSize           int64         `hcl:"part_size,size" default:"16MiB" doc:"Size of the parts of multipart uploads (at least 5MiB); objects up to it go in one PUT."`
	Concurrency        int           `hcl:"concurrency" default:"4" doc:"Parts of one object uploaded in parallel."`
	Timeout            time.Duration `hcl:"timeout" default:"30s" doc:"How long to wait for the endpoint to connect or answer a request; an endpoint that does not gives ErrUnavailable."`
	MaxRetries         int           `hcl:"max_retries" default:"3" doc:"Attempts per request before a failure is reported (the runtime retries whole operations itself)."`
}

// ConfigSpec implements plugin.Configurable: Config is the config block.
func (s *Store) ConfigSpec() plugin.ConfigSpec { return plugin.TypedConfig(s.Configure) }

// EnvEndpointURL and EnvEndpointURLS3 name the AWS SDKs' variables for
// another S3 endpoint ("http://127.0.0.1:9000"), which the plugin uses when
// its config names no endpoint; the S3 one wins.
const (
	EnvEndpointURL   = "AWS_ENDPOINT_URL"
	EnvEndpointURLS3 = "AWS_ENDPOINT_URL_S3"
)

// endpointFromEnv returns the endpoint of a config that names none: the
// host:port of $AWS_ENDPOINT_URL_S3, else of $AWS_ENDPOINT_URL, with TLS as
// its scheme says; else AWS S3 with secure unchanged.
func endpointFromEnv(secure bool) (string, bool, error) {
	for _, name := range []string{EnvEndpointURLS3, EnvEndpointURL} {
		v := strings.TrimSpace(os.Getenv(name))
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
			return "", false, fmt.Errorf("endpoint: $%s = %q: want http://host:port or https://host:port", name, v)
		}
		return u.Host, u.Scheme == "https", nil
	}
	return "s3.amazonaws.com", secure, nil
}

// Configure checks that the endpoint answers, that the credentials work
// and that the bucket exists (or creates it with create_bucket = true).
func (s *Store) Configure(ctx context.Context, cfg Config) error {
	bucket := cfg.Bucket
	if bucket == "" {
		return errors.New("bucket: the bucket to store objects in is required")
	}
	prefix := strings.Trim(cfg.Prefix, "/")
	if prefix != "" {
		if err := storage.ValidKey(prefix); err != nil {
			return fmt.Errorf("prefix: %q is not a valid key prefix: %v", cfg.Prefix, err)
		}
		prefix += "/"
	}
	partSize := cfg.PartSize
	if partSize < MinPartSize || partSize > MaxPartSize {
		return fmt.Errorf("part_size: %d bytes is outside S3's limits (5MiB to 5GiB)", partSize)
	}
	concurrency := cfg.Concurrency
	if concurrency < 1 || concurrency > 64 {
		return fmt.Errorf("concurrency: want a whole number from 1 to 64, got %v", concurrency)
	}
	maxRetries := cfg.MaxRetries
	if maxRetries < 1 || maxRetries > 20 {
		return fmt.Errorf("max_retries: want a whole number from 1 to 20, got %v", maxRetries)
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		return fmt.Errorf("timeout: want a positive duration, got %q", timeout)
	}
	secure := cfg.TLS
	endpoint := cfg.Endpoint
	if endpoint == "" {
		var err error
		if endpoint, secure, err = endpointFromEnv(secure); err != nil {
			return err
		}
	}
	if strings.Contains(endpoint, "://") || strings.Contains(endpoint, "/") {
		return fmt.Errorf("endpoint: want host:port without a scheme or path (set tls = false for http), got %q", endpoint)
	}

	transport, err := minio.DefaultTransport(secure)
	if err != nil {
		return fmt.Errorf("creating the HTTP transport: %w", err)
	}
	transport.DialContext = (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext
	transport.TLSHandshakeTimeout = timeout
	transport.ResponseHeaderTimeout = timeout
	if cfg.InsecureSkipVerify {
		if transport.TLSClientConfig == nil {
			transport.TLSClientConfig = &tls.Config{}
		}
		transport.TLSClientConfig.InsecureSkipVerify = true //nolint:gosec // asked for by the operator
	}

	var creds *credentials.Credentials
	accessKey := cfg.AccessKey
	switch {
	case accessKey != "":
		if cfg.SecretKey == "" {
			return errors.New("secret_key: required with access_key")
		}
		creds = credentials.NewStaticV4(accessKey, cfg.SecretKey, cfg.SessionToken)
	case cfg.SecretKey != "" || cfg.SessionToken != "":
		return errors.New("access_key: required with secret_key and session_token")
	default:
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{},
			&credentials.IAM{Client: &http.Client{Transport: transport}},
		})
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := creds.GetWithContext(&credentials.CredContext{Client: &http.Client{Transport: transport}, Context: cctx})
	if err != nil {
		return fmt.Errorf("%w: getting credentials: %v", storage.ErrPermission, err)
	}
	if v.AccessKeyID == "" {
		return fmt.Errorf("%w: no credentials: access_key is not set and the AWS chain found none (no AWS_ACCESS_KEY_ID, no ~/.aws/credentials profile, no IAM role)", storage.ErrPermission)
	}
	client, err := minio.New(endpoint, &minio.Options{
		Creds:      creds,
		Secure:     secure,
		Transport:  transport,
		Region:     cfg.Region,
		MaxRetries: maxRetries,
	})
	if err != nil {
		return fmt.Errorf("endpoint: %w", err)
	}
	c := &config{
		client:      client,
		core:        minio.Core{Client: client},
		bucket:      bucket,
		prefix:      prefix,
		endpoint:    endpoint,
		accessKeyID: v.AccessKeyID,
		partSize:    partSize,
		concurrency: concurrency,
		timeout:     timeout,
		parts:       make(chan struct{}, 2*concurrency),
	}
	c.pool = &sync.Pool{New: func() any { b := make([]byte, c.partSize); return &b }}
	if err := c.checkBucket(cctx, cfg.CreateBucket, cfg.Region); err != nil {
		return err
	}
	s.mu.Lock()
	s.cfg = c
	log := s.log
	s.mu.Unlock()
	log.Info("configured", "endpoint", endpoint, "bucket", bucket, "prefix", prefix, "access_key", v.AccessKeyID, "part_size", partSize, "concurrency", concurrency)
	s.retryAborts(cctx)
	return nil
}

// checkBucket checks that the bucket exists and that the credentials may
// use it, creating it when asked to.
func (c *config) checkBucket(ctx context.Context, create bool, region string) error {
	exists, err := c.client.BucketExists(ctx, c.bucket)
	if err != nil {
		err = c.classify(err)
		if errors.Is(err, storage.ErrPermission) {
			// HEAD answers a bare 403; a GET tells why.
			if _, lerr := c.core.ListObjectsV2(c.bucket, c.prefix, "", "", "", 1); lerr != nil {
				if lerr := c.classify(lerr); errors.Is(lerr, storage.ErrPermission) {
					err = lerr
				}
			}
		}
		return fmt.Errorf("checking bucket %q at %s: %w", c.bucket, c.endpoint, err)
	}
	if exists {
		return nil
	}
	if !create {
		return fmt.Errorf("bucket %q does not exist at %s; create it, or set create_bucket = true to have the plugin create it", c.bucket, c.endpoint)
	}
	if err := c.client.MakeBucket(ctx, c.bucket, minio.MakeBucketOptions{Region: region}); err != nil {
		code := s3Error(err).Code
		if code != "BucketAlreadyOwnedByYou" && code != "BucketAlreadyExists" {
			return fmt.Errorf("creating bucket %q at %s: %w", c.bucket, c.endpoint, c.classify(err))
		}
	}
	return nil
}

// Health implements plugin.HealthChecker. It retries the aborts of
// uploads that failed while the endpoint was unreachable. It does not fail
// when the endpoint is down: calls report storage.ErrUnavailable then, and
// restarting the plugin would not help.
func (s *Store) Health(ctx context.Context) error {
	if _, err := s.conf(); err != nil {
		return err
	}
	// Spend at most half of the check's time (and 2 s) on it, so that a
	// slow endpoint never makes the check itself fail.
	budget := 2 * time.Second
	if d, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(d)/2)
	}
	rctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	s.retryAborts(rctx)
	return nil
}

// PendingAborts returns how many failed uploads still wait to be aborted.
func (s *Store) PendingAborts() int {
	s.abortMu.Lock()
	defer s.abortMu.Unlock()
	return len(s.aborts)
}

func (s *Store) retryAborts(ctx context.Context) {
	c, err := s.conf()
	if err != nil {
		return
	}
	s.abortMu.Lock()
	pending := s.aborts
	s.aborts = nil
	s.abortMu.Unlock()
	for i, p := range pending {
		actx, cancel := context.WithTimeout(ctx, c.timeout)
		err := c.abort(actx, p.object, p.uploadID)
		cancel()
		if err != nil {
			s.abortMu.Lock()
			s.aborts = append(s.aborts, pending[i:]...)
			s.abortMu.Unlock()
			return
		}
	}
}

// abort aborts an upload; an upload that is already gone is fine.
func (c *config) abort(ctx context.Context, object, uploadID string) error {
	err := c.core.AbortMultipartUpload(ctx, c.bucket, object, uploadID)
	if err != nil && s3Error(err).Code == "NoSuchUpload" {
		return nil
	}
	return err
}

func (s *Store) conf() (*config, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.cfg == nil {
		return nil, fmt.Errorf("%w: the s3 storage is not configured", storage.ErrUnavailable)
	}
	return s.cfg, nil
}

// Info implements storage.Storage.
func (s *Store) Info(context.Context, *storage.InfoRequest) (*storage.InfoResponse, error) {
	return &storage.InfoResponse{Name: "s3", Location: s.Location()}, nil
}

// Location returns "s3://bucket/prefix" (empty before Configure).
func (s *Store) Location() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.cfg == nil {
		return ""
	}
	return "s3://" + s.cfg.bucket + "/" + strings.TrimSuffix(s.cfg.prefix, "/")
}

// ---------------------------------------------------------------- errors

// classify adds the storage error kind that matches an S3 or network
// error.
func (c *config) classify(err error) error {
	if err == nil {
		return nil
	}
	for _, known := range []error{context.Canceled, context.DeadlineExceeded, storage.ErrSizeMismatch,
		storage.ErrBadKey, storage.ErrUnavailable, storage.ErrPermission, storage.ErrNotFound, storage.ErrInvalidRange} {
		if errors.Is(err, known) {
			return err
		}
	}
	resp := s3Error(err)
	switch resp.Code {
	case "NoSuchKey":
		return fmt.Errorf("%w: %s", storage.ErrNotFound, resp.Message)
	case "InvalidRange":
		return fmt.Errorf("%w: %s", storage.ErrInvalidRange, resp.Message)
	case "InvalidAccessKeyId":
		return fmt.Errorf("%w: the access key %q is not known to %s (%s)", storage.ErrPermission, c.accessKeyID, c.endpoint, resp.Code)
	case "SignatureDoesNotMatch":
		return fmt.Errorf("%w: the secret key does not match the access key %q (%s)", storage.ErrPermission, c.accessKeyID, resp.Code)
	case "AccessDenied", "InvalidToken", "ExpiredToken", "TokenRefreshRequired", "AllAccessDisabled", "AccountProblem", "InvalidSecurity":
		return fmt.Errorf("%w: access key %q: %s: %s", storage.ErrPermission, c.accessKeyID, resp.Code, resp.Message)
	case "NoSuchBucket":
		return fmt.Errorf("%w: bucket %q does not exist at %s any more", storage.ErrUnavailable, c.bucket, c.endpoint)
	case "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "RequestTimeTooSkewed",
		"XMinioServerNotInitialized", "XMinioStorageFull", "XMinioReadQuorum", "XMinioWriteQuorum", "OperationTimedOut":
		return fmt.Errorf("%w: %s: %s", storage.ErrUnavailable, resp.Code, resp.Message)
	}
	switch {
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%w: access key %q: %s", storage.ErrPermission, c.accessKeyID, err)
	case resp.StatusCode >= 500:
		return fmt.Errorf("%w: %s", storage.ErrUnavailable, err)
	case resp.StatusCode == http.StatusNotFound && resp.Code == "":
		return fmt.Errorf("%w: %s", storage.ErrNotFound, err)
	case resp.StatusCode == 0 && isNetwork(err):
		return fmt.Errorf("%w: %s: %w", storage.ErrUnavailable, c.endpoint, err)
	}
	return err
}

// s3Error returns the S3 error response in err's chain (zero if none).
func s3Error(err error) minio.ErrorResponse {
	var r minio.ErrorResponse
	if errors.As(err, &r) {
		return r
	}
	return minio.ErrorResponse{}
}

// isNetwork reports whether err is a failure to reach or talk to the
// endpoint.
func isNetwork(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "connection reset") ||
		strings.Contains(err.Error(), "broken pipe") || strings.Contains(err.Error(), "server closed")
}

// ---------------------------------------------------------------- write

// Write implements storage.Storage. An object up to part_size goes in one
// PUT; a larger one in a multipart upload of part_size parts, concurrency
// of them in flight, which is completed only once every byte arrived and
// the context is still live, and aborted otherwise (an upload that is not
// completed is invisible).
func (s *Store) Write(ctx context.Context, req *storage.WriteRequest) (*storage.WriteResponse, error) {
	if req == nil {
		req = &storage.WriteRequest{}
	}
	url, err := s.write(ctx, req)
	if err != nil {
		c, _ := s.conf()
		if c != nil {
			err = c.classify(err)
		}
		return nil, &storage.StorageError{Op: storage.OpWrite, Key: req.Key, Err: err}
	}
	return &storage.WriteResponse{URL: url}, nil
}

func (s *Store) write(ctx context.Context, req *storage.WriteRequest) (string, error) {
	if err := storage.ValidKey(req.Key); err != nil {
		return "", err
	}
	if req.Size < 0 {
		return "", fmt.Errorf("%w: size %d is negative; the exact size must be known", storage.ErrSizeMismatch, req.Size)
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	c, err := s.conf()
	if err != nil {
		return "", err
	}
	object := c.prefix + req.Key
	url := "s3://" + c.bucket + "/" + object
	body := storage.ContextReader(ctx, storage.ExactReader(req.Body, req.Size))
	partSize := max(c.partSize, (req.Size+maxParts-1)/maxParts)
	if req.Size <= partSize {
		return url, c.putSmall(ctx, object, body, req.Size)
	}
	uploadID, err := c.putMultipart(ctx, object, body, req.Size, partSize)
	if err != nil && uploadID != "" {
		// Also when (because) ctx has ended.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
		aerr := c.abort(actx, object, uploadID)
		cancel()
		if aerr != nil {
			s.logger().Warn("aborting a failed upload failed; retrying later", "object", object, "upload_id", uploadID, "error", aerr)
			s.abortMu.Lock()
			s.aborts = append(s.aborts, pendingAbort{object, uploadID})
			s.abortMu.Unlock()
		}
	}
	return url, err
}

// putSmall reads the whole object, then PUTs it (a seekable body, so the
// client may retry the request).
func (c *config) putSmall(ctx context.Context, object string, body io.Reader, size int64) error {
	var buf []byte
	if size <= smallObject {
		buf = make([]byte, size)
	} else {
		b, release, err := c.partBuffer(ctx, size)
		if err != nil {
			return err
		}
		defer release()
		buf = b
	}
	if err := readExactly(body, buf); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := c.core.PutObject(ctx, c.bucket, object, bytes.NewReader(buf), size, "", "", minio.PutObjectOptions{})
	return err
}

// readExactly fills buf from body and checks that body ends there.
func readExactly(body io.Reader, buf []byte) error {
	if _, err := io.ReadFull(body, buf); err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return fmt.Errorf("%w: the body ended early", storage.ErrSizeMismatch)
		}
		return err
	}
	var probe [1]byte
	if n, err := body.Read(probe[:]); n > 0 || err != io.EOF {
		if err == nil || err == io.EOF {
			err = fmt.Errorf("%w: the body has more bytes than announced", storage.ErrSizeMismatch)
		}
		return err
	}
	return nil
}

// partBuffer takes one of the shared part buffers (waiting for one while
// the writes in flight hold them all) and returns it with its release.
func (c *config) partBuffer(ctx context.Context, n int64) ([]byte, func(), error) {
	select {
	case c.parts <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	if n > c.partSize { // a huge object's larger parts
		b := make([]byte, n)
		return b, func() { <-c.parts }, nil
	}
	bp := c.pool.Get().(*[]byte)
	return (*bp)[:n], func() { c.pool.Put(bp); <-c.parts }, nil
}

// putMultipart uploads the object in parts. It returns the upload's id
// (also on failure, for the caller to abort it).
func (c *config) putMultipart(ctx context.Context, object string, body io.Reader, size, partSize int64) (string, error) {
	uploadID, err := c.core.NewMultipartUpload(ctx, c.bucket, object, minio.PutObjectOptions{})
	if err != nil {
		return "", err
	}
	nparts := int((size + partSize - 1) / partSize)
	parts := make([]minio.CompletePart, nparts)
	uctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg       sync.WaitGroup
		inflight = make(chan struct{}, c.concurrency)
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel(err) })
	}
	for i := range nparts {
		n := min(partSize, size-int64(i)*partSize)
		select {
		case inflight <- struct{}{}:
		case <-uctx.Done():
		}
		if uctx.Err() != nil {
			break
		}
		buf, release, err := c.partBuffer(uctx, n)
		if err != nil {
			<-inflight
			fail(err)
			break
		}
		var rerr error
		if i == nparts-1 {
			rerr = readExactly(body, buf)
		} else if _, rerr = io.ReadFull(body, buf); rerr == io.ErrUnexpectedEOF || rerr == io.EOF {
			rerr = fmt.Errorf("%w: the body ended early", storage.ErrSizeMismatch)
		}
		if rerr != nil {
			release()
			<-inflight
			fail(rerr)
			break
		}
		wg.Go(func() {
			defer func() { release(); <-inflight }()
			p, err := c.core.PutObjectPart(uctx, c.bucket, object, uploadID, i+1, bytes.NewReader(buf), n, minio.PutObjectPartOptions{})
			if err != nil {
				fail(fmt.Errorf("uploading part %d of %d: %w", i+1, nparts, err))
				return
			}
			parts[i] = minio.CompletePart{PartNumber: i + 1, ETag: p.ETag}
		})
	}
	wg.Wait()
	if firstErr != nil {
		// Prefer the caller's reason (its context ended) over what it
		// caused in the requests in flight.
		if err := ctx.Err(); err != nil {
			return uploadID, err
		}
		return uploadID, firstErr
	}
	if err := ctx.Err(); err != nil {
		return uploadID, err
	}
	if _, err := c.core.CompleteMultipartUpload(ctx, c.bucket, object, uploadID, parts, minio.PutObjectOptions{}); err != nil {
		return uploadID, fmt.Errorf("completing the upload: %w", err)
	}
	return "", nil
}

// ---------------------------------------------------------------- read

// Read implements storage.Storage with one ranged GET.
func (s *Store) Read(ctx context.Context, req *storage.ReadRequest) (*storage.ReadResponse, error) {
	if req == nil {
		req = &storage.ReadRequest{}
	}
	r, err := s.read(ctx, req)
	if err != nil {
		if c, _ := s.conf(); c != nil {
			err = c.classify(err)
		}
		return nil, &storage.StorageError{Op: storage.OpRead, Key: req.Key, Err: err}
	}
	return r, nil
}

func (s *Store) read(ctx context.Context, req *storage.ReadRequest) (*storage.ReadResponse, error) {
	if err := storage.ValidKey(req.Key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := s.conf()
	if err != nil {
		return nil, err
	}
	if req.Offset < 0 || req.Length < storage.ToEnd {
		_, err := storage.CheckRange(req.Offset, req.Length, 0)
		return nil, err
	}
	object := c.prefix + req.Key
	empty := func() (*storage.ReadResponse, error) {
		info, err := c.client.StatObject(ctx, c.bucket, object, minio.StatObjectOptions{})
		if err != nil {
			return nil, err
		}
		if _, err := storage.CheckRange(req.Offset, req.Length, info.Size); err != nil {
			return nil, err
		}
		return &storage.ReadResponse{Body: io.NopCloser(bytes.NewReader(nil))}, nil
	}
	if req.Length == 0 {
		return empty()
	}
	var opts minio.GetObjectOptions
	switch {
	case req.Length == storage.ToEnd && req.Offset > 0:
		_ = opts.SetRange(req.Offset, 0)
	case req.Length > 0:
		_ = opts.SetRange(req.Offset, req.Offset+req.Length-1)
	}
	body, info, header, err := c.core.GetObject(ctx, c.bucket, object, opts)
	if err != nil {
		if s3Error(err).Code == "InvalidRange" {
			// The range starts at or past the end: empty, or invalid.
			return empty()
		}
		return nil, err
	}
	total := info.Size
	if cr := header.Get("Content-Range"); cr != "" {
		if t, ok := contentRangeTotal(cr); ok {
			total = t
		}
	}
	n, err := storage.CheckRange(req.Offset, req.Length, total)
	if err != nil {
		body.Close()
		return nil, err
	}
	if info.Size != n {
		body.Close()
		return nil, fmt.Errorf("%w: the endpoint answered %d bytes for a %d-byte range", storage.ErrUnavailable, info.Size, n)
	}
	return &storage.ReadResponse{Size: n, Body: &getBody{ctx: ctx, c: c, body: body, left: n}}, nil
}

// contentRangeTotal parses the total of "bytes a-b/total".
func contentRangeTotal(cr string) (int64, bool) {
	i := strings.LastIndexByte(cr, '/')
	if i < 0 {
		return 0, false
	}
	t, err := strconv.ParseInt(cr[i+1:], 10, 64)
	return t, err == nil
}

// getBody is a Read's Body: the GET's response body, checked for length
// and with its errors classified.
type getBody struct {
	ctx  context.Context
	c    *config
	body io.ReadCloser
	left int64
}

func (b *getBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	if b.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.body.Read(p)
	b.left -= int64(n)
	switch {
	case err == io.EOF && b.left > 0:
		return n, fmt.Errorf("%w: the response ended %d bytes early", storage.ErrUnavailable, b.left)
	case err == io.EOF:
		return n, io.EOF
	case err != nil:
		if cerr := b.ctx.Err(); cerr != nil {
			return n, cerr
		}
		return n, b.c.classify(err)
	}
	return n, nil
}

func (b *getBody) Close() error { return b.body.Close() }

// ---------------------------------------------------------------- delete, list

// Delete implements storage.Storage with multi-object deletes.
func (s *Store) Delete(ctx context.Context, req *storage.DeleteRequest) (*storage.DeleteResponse, error) {
	if req == nil {
		req = &storage.DeleteRequest{}
	}
	for _, k := range req.Keys {
		if err := storage.ValidKey(k); err != nil {
			return nil, &storage.StorageError{Op: storage.OpDelete, Key: k, Err: err}
		}
	}
	if len(req.Keys) == 0 {
		return &storage.DeleteResponse{}, nil
	}
	c, err := s.conf()
	if err != nil {
		return nil, &storage.StorageError{Op: storage.OpDelete, Err: err}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	objs := make(chan minio.ObjectInfo)
	go func() {
		defer close(objs)
		for _, k := range req.Keys {
			select {
			case objs <- minio.ObjectInfo{Key: c.prefix + k}:
			case <-ctx.Done():
				return
			}
		}
	}()
	var first error
	var firstKey string
	for e := range c.client.RemoveObjects(ctx, c.bucket, objs, minio.RemoveObjectsOptions{}) {
		if first == nil && e.Err != nil && s3Error(e.Err).Code != "NoSuchKey" {
			first, firstKey = e.Err, strings.TrimPrefix(e.ObjectName, c.prefix)
		}
	}
	if first == nil {
		first = ctx.Err()
	}
	if first != nil {
		return nil, &storage.StorageError{Op: storage.OpDelete, Key: firstKey, Err: c.classify(first)}
	}
	return &storage.DeleteResponse{}, nil
}

// List implements storage.Storage.
func (s *Store) List(ctx context.Context, req *storage.ListRequest) (*storage.ListResponse, error) {
	if req == nil {
		req = &storage.ListRequest{}
	}
	fail := func(err error) (*storage.ListResponse, error) {
		return nil, &storage.StorageError{Op: storage.OpList, Key: req.Prefix, Err: err}
	}
	if err := storage.ValidPrefix(req.Prefix); err != nil {
		return fail(err)
	}
	c, err := s.conf()
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &storage.ListResponse{}
	for o := range c.client.ListObjects(ctx, c.bucket, minio.ListObjectsOptions{Prefix: c.prefix + req.Prefix, Recursive: true}) {
		if o.Err != nil {
			return fail(c.classify(o.Err))
		}
		key := strings.TrimPrefix(o.Key, c.prefix)
		if storage.ValidKey(key) != nil {
			continue // put there by something else, under a name no key has
		}
		out.Objects = append(out.Objects, storage.ObjectInfo{Key: key, Size: o.Size})
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	slices.SortFunc(out.Objects, func(a, b storage.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
