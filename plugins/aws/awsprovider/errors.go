package awsprovider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/cenkalti/backoff/v5"
	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/sdk/provider"
)

// APIError is an EC2 call that failed, after its retries: the action, EC2's
// error code and message, how many attempts were made. It matches
// (errors.Is) the provider error it maps to: provider.ErrUnavailable
// (throttling, an endpoint that cannot be reached, EC2's own failures,
// credentials refused), provider.ErrQuotaExceeded (no capacity, an
// account limit), provider.ErrNotFound (an image, subnet, group, key or
// profile that does not exist) or provider.ErrInvalidRequest (anything
// else EC2 refuses).
type APIError struct {
	// Action is the EC2 API action, e.g. "RunInstances".
	Action string
	// Code is EC2's error code, e.g. "InsufficientInstanceCapacity"; empty
	// when no answer came (the endpoint could not be reached).
	Code string
	// Message is EC2's message (or the transport error), with credentials
	// redacted.
	Message string
	// Attempts is how many times the call was made.
	Attempts int
	// Kind is the provider error it maps to.
	Kind error
}

// Error implements error: `provider quota exceeded: EC2 RunInstances:
// InsufficientInstanceCapacity: ... (3 attempts)`.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: EC2 %s: ", e.Kind, e.Action)
	if e.Code != "" {
		b.WriteString(e.Code + ": ")
	}
	b.WriteString(e.Message)
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (%d attempts)", e.Attempts)
	}
	return b.String()
}

// Unwrap returns the provider error it maps to.
func (e *APIError) Unwrap() error { return e.Kind }

// errorClass says what an EC2 error means: whether to retry it and the
// provider error it becomes.
type errorClass struct {
	retry bool
	kind  error
}

var (
	throttled   = errorClass{retry: true, kind: provider.ErrUnavailable}
	noCapacity  = errorClass{retry: true, kind: provider.ErrQuotaExceeded}
	unavailable = errorClass{retry: true, kind: provider.ErrUnavailable}
	refusedAuth = errorClass{kind: provider.ErrUnavailable}
	notFound    = errorClass{kind: provider.ErrNotFound}
	invalid     = errorClass{kind: provider.ErrInvalidRequest}
)

// codeClasses are EC2's error codes (and the AWS SDKs' common ones) that
// are not refusals of the request itself.
var codeClasses = map[string]errorClass{
	// Throttling.
	"RequestLimitExceeded":       throttled,
	"Throttling":                 throttled,
	"ThrottlingException":        throttled,
	"ThrottledException":         throttled,
	"RequestThrottled":           throttled,
	"RequestThrottledException":  throttled,
	"TooManyRequestsException":   throttled,
	"SlowDown":                   throttled,
	"PriorRequestNotComplete":    throttled,
	"EC2ThrottledException":      throttled,
	"BandwidthLimitExceeded":     throttled,
	"RequestResourceCountExceed": throttled,
	// No capacity, account limits.
	"InsufficientInstanceCapacity":         noCapacity,
	"InsufficientHostCapacity":             noCapacity,
	"InsufficientReservedInstanceCapacity": noCapacity,
	"InsufficientCapacity":                 noCapacity,
	"InsufficientCapacityOnHost":           noCapacity,
	"InsufficientAddressCapacity":          noCapacity,
	"InsufficientFreeAddressesInSubnet":    noCapacity,
	"InstanceLimitExceeded":                noCapacity,
	"VcpuLimitExceeded":                    noCapacity,
	"MaxSpotInstanceCountExceeded":         noCapacity,
	"SpotMaxPriceTooLow":                   noCapacity,
	"VolumeLimitExceeded":                  noCapacity,
	"ResourceLimitExceeded":                noCapacity,
	"AddressLimitExceeded":                 noCapacity,
	"NetworkInterfaceLimitExceeded":        noCapacity,
	// EC2's own failures.
	"InternalError":               unavailable,
	"InternalFailure":             unavailable,
	"ServiceUnavailable":          unavailable,
	"Unavailable":                 unavailable,
	"RequestTimeout":              unavailable,
	"RequestTimeoutException":     unavailable,
	"ServiceUnavailableException": unavailable,
	// Credentials and permissions: the provider's setup, not the request.
	"AuthFailure":                 refusedAuth,
	"UnauthorizedOperation":       refusedAuth,
	"InvalidClientTokenId":        refusedAuth,
	"SignatureDoesNotMatch":       refusedAuth,
	"IncompleteSignature":         refusedAuth,
	"MissingAuthenticationToken":  refusedAuth,
	"InvalidAccessKeyId":          refusedAuth,
	"ExpiredToken":                refusedAuth,
	"RequestExpired":              refusedAuth,
	"OptInRequired":               refusedAuth,
	"Blocked":                     refusedAuth,
	"PendingVerification":         refusedAuth,
	"AccessDenied":                refusedAuth,
	"AccessDeniedException":       refusedAuth,
	"UnrecognizedClientException": refusedAuth,
	// Things the request names that are not there.
	"NoSuchEntity": notFound,
}

// classify says what err, an EC2 call's error, means, with EC2's code and
// message ("" and the error's text when no answer came).
func classify(err error) (errorClass, string, string) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code := ae.ErrorCode()
		msg := ae.ErrorMessage()
		if c, ok := codeClasses[code]; ok {
			return c, code, msg
		}
		switch {
		case strings.HasSuffix(code, ".NotFound") || strings.HasSuffix(code, ".Unavailable"):
			return notFound, code, msg
		case strings.HasPrefix(code, "Insufficient"):
			return noCapacity, code, msg
		}
		var re *smithyhttp.ResponseError
		if errors.As(err, &re) && re.Response != nil && re.HTTPStatusCode() >= 500 {
			return unavailable, code, msg
		}
		return invalid, code, msg
	}
	// No answer from EC2: the endpoint cannot be reached (or answered
	// something that is not EC2's).
	return unavailable, "", err.Error()
}

// retryPolicy is how EC2 calls are retried.
type retryPolicy struct {
	maxRetries   int
	initial, max time.Duration
}

// deadlineMargin is kept free before the caller's deadline: a retry that
// would not end before it is not started, and the last EC2 error is
// reported instead of the deadline.
const deadlineMargin = 500 * time.Millisecond

// caller is what an EC2 call needs besides its arguments: the settings
// (client, retries), the logger, and the secrets (credentials, the
// cluster's token) no error or log line may show.
type caller struct {
	s       *settings
	log     hclog.Logger
	secrets []string
}

// call runs fn, an EC2 call named action, retrying what classify says to
// (throttling, no capacity, limits, EC2's own failures, an unreachable
// endpoint) with exponential backoff, at most maxRetries times and never
// past ctx's deadline. Its error is an *APIError (with the secrets
// redacted), or ctx's error (matching context.Canceled or
// context.DeadlineExceeded) when ctx ended.
func call[T any](ctx context.Context, c caller, action string, fn func(context.Context) (T, error)) (T, error) {
	s, log := c.s, c.log
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	attempts := 0
	var last error
	op := func() (T, error) {
		attempts++
		v, err := fn(ctx)
		if err == nil {
			return v, nil
		}
		last = err
		if ctx.Err() != nil {
			return v, backoff.Permanent(err)
		}
		if class, _, _ := classify(err); !class.retry {
			return v, backoff.Permanent(err)
		}
		return v, err
	}
	exp := backoff.NewExponentialBackOff()
	exp.InitialInterval, exp.MaxInterval = s.retry.initial, s.retry.max
	opts := []backoff.RetryOption{
		backoff.WithBackOff(exp),
		backoff.WithMaxTries(uint(s.retry.maxRetries) + 1),
		backoff.WithNotify(func(err error, wait time.Duration) {
			_, code, msg := classify(err)
			log.Warn("EC2 call failed; retrying", "action", action, "code", code, "error", redact(msg, c.secrets), "attempt", attempts, "wait", wait)
		}),
	}
	if dl, ok := ctx.Deadline(); ok {
		opts = append(opts, backoff.WithMaxElapsedTime(max(time.Until(dl)-deadlineMargin, time.Nanosecond)))
	}
	v, err := backoff.Retry(ctx, op, opts...)
	if err == nil {
		return v, nil
	}
	if cerr := ctx.Err(); cerr != nil {
		if last != nil {
			_, code, msg := classify(last)
			return v, fmt.Errorf("EC2 %s: %w (after %d attempts; the last failed with %s)", action, cerr, attempts, redact(strings.TrimSpace(code+" "+msg), c.secrets))
		}
		return v, fmt.Errorf("EC2 %s: %w", action, cerr)
	}
	if last == nil {
		last = err
	}
	return v, apiError(c, action, last, attempts)
}

// apiError returns the *APIError of err, an EC2 call's error.
func apiError(cl caller, action string, err error, attempts int) *APIError {
	s := cl.s
	c, code, msg := classify(err)
	if code == "" {
		where := "AWS"
		if s.endpoint != "" {
			where = s.endpoint
		}
		msg = fmt.Sprintf("cannot reach EC2 (%s, region %s): %s", where, s.region, msg)
	}
	return &APIError{Action: action, Code: code, Message: redact(msg, cl.secrets), Attempts: attempts, Kind: c.kind}
}

// codeOf returns the EC2 error code of err ("" when it has none).
func codeOf(err error) string {
	var e *APIError
	if errors.As(err, &e) {
		return e.Code
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// redact replaces each secret (credentials, the cluster token) in text.
func redact(text string, secrets []string) string {
	for _, s := range secrets {
		if len(s) >= 4 {
			text = strings.ReplaceAll(text, s, "<redacted>")
		}
	}
	return text
}
