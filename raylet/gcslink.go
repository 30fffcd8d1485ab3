package raylet

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
)

// DefaultGCSReconnectTimeout is how long a raylet goes on without any
// successful call to the GCS before it stops the node (Ray's
// gcs_rpc_server_reconnect_timeout_s).
const DefaultGCSReconnectTimeout = 60 * time.Second

// Backoff between attempts to reach the GCS: registering at start, and
// heartbeats during an outage (which start at the report period).
const (
	gcsRetryInitial = 100 * time.Millisecond
	gcsRetryMax     = 5 * time.Second
)

// errBox holds the error a node stopped itself with.
type errBox struct{ err error }

// Err returns why the node stopped itself, once Done is closed for that
// reason: *GCSUnreachableError (no GCS call succeeded for
// Config.GCSReconnectTimeout), *OtherClusterError (the GCS belongs to
// another cluster), *RegistrationRefusedError or *DeclaredDeadError. It is
// nil while the node runs and when it was asked to stop (ShutdownNode, its
// host).
func (r *Raylet) Err() error {
	if b := r.stopErr.Load(); b != nil {
		return b.err
	}
	return nil
}

// stopWith records err as why the node stops (the first reason wins) and
// asks the host to stop it (Done).
func (r *Raylet) stopWith(err error) {
	if r.stopErr.CompareAndSwap(nil, &errBox{err: err}) {
		r.log.Error("stopping the node", "node_id", r.cfg.NodeID, "error", err)
	}
	r.closeDone()
}

// gcsGivenUp reports whether the node stopped itself because the GCS is
// out of reach or not its cluster's: then Shutdown does not call it.
func (r *Raylet) gcsGivenUp() bool {
	var (
		gu *GCSUnreachableError
		oc *OtherClusterError
	)
	err := r.Err()
	return errors.As(err, &gu) || errors.As(err, &oc)
}

// contacted records a successful call to the GCS.
func (r *Raylet) contacted(now time.Time) { r.lastContact.Store(now.UnixNano()) }

// silentFor is how long no call to the GCS has succeeded.
func (r *Raylet) silentFor(now time.Time) time.Duration {
	return now.Sub(time.Unix(0, r.lastContact.Load()))
}

// gcsAddress names the GCS in messages.
func (r *Raylet) gcsAddress() string {
	if r.cfg.GCSAddress != "" {
		return r.cfg.GCSAddress
	}
	return "(unknown address)"
}

// register registers the node (again) with the GCS, with the cluster id
// learned at the first registration and whether it holds placement group
// bundles (the GCS then sweeps them), and remembers the cluster id the GCS
// answers. A refusal is a permanent error that stops the node
// (*OtherClusterError, *RegistrationRefusedError); other errors may pass.
func (r *Raylet) register(ctx context.Context) (*gorayv1.RegisterNodeReply, error) {
	req := &gorayv1.RegisterNodeRequest{Node: r.nodeInfo(), HoldsBundles: r.sched.holdsBundles()}
	if c := r.clusterID.Load(); c != nil {
		req.ClusterId = *c
	}
	cctx, cancel := context.WithTimeout(ctx, gcsTimeout)
	r.regUnanswered.Store(true)
	reply, err := r.cfg.GCS.RegisterNode(cctx, req)
	cancel()
	if ctx.Err() == nil {
		// Answered, or failed on its own: only a cancelled call leaves
		// the GCS's verdict unknown.
		r.regUnanswered.Store(false)
	}
	if err != nil {
		return nil, r.registrationError(req.GetClusterId(), err)
	}
	now := time.Now()
	r.contacted(now)
	if c := reply.GetClusterId(); c != "" {
		r.clusterID.Store(&c)
	}
	return reply, nil
}

// registrationError classifies a failed registration: a refusal
// (FailedPrecondition, InvalidArgument, PermissionDenied, Unauthenticated)
// is permanent, anything else is worth another try.
func (r *Raylet) registrationError(cluster string, err error) error {
	st := status.Convert(err)
	switch st.Code() {
	case codes.FailedPrecondition:
		if rpc.HasReason(st, rpc.ReasonOtherCluster) {
			return backoff.Permanent(&OtherClusterError{Address: r.gcsAddress(), Node: r.cfg.NodeID, Cluster: cluster, Err: err})
		}
		return backoff.Permanent(&RegistrationRefusedError{Address: r.gcsAddress(), Node: r.cfg.NodeID, Err: err})
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated:
		return backoff.Permanent(&RegistrationRefusedError{Address: r.gcsAddress(), Node: r.cfg.NodeID, Err: err})
	}
	return err
}

// registerAtStart registers the node, retrying with backoff while the GCS
// cannot be reached (a node may start before its head) for at most the
// reconnect timeout. It fails with the refusal, a *GCSUnreachableError,
// or ctx's error (also when Shutdown starts).
func (r *Raylet) registerAtStart(ctx context.Context) (*gorayv1.RegisterNodeReply, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := time.Now()
	r.contacted(start)
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = gcsRetryInitial, gcsRetryMax
	var last error
	reply, err := backoff.Retry(ctx, func() (*gorayv1.RegisterNodeReply, error) {
		reply, err := r.register(ctx)
		if err != nil && last == nil && !isPermanent(err) {
			r.log.Warn("cannot reach the GCS to register the node; retrying", "gcs", r.gcsAddress(), "error", err, "give_up_after", r.reconnectTimeout)
		}
		last = err
		return reply, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(r.reconnectTimeout))
	if err == nil || ctx.Err() != nil || isStopError(err) {
		return reply, err
	}
	return nil, &GCSUnreachableError{Address: r.gcsAddress(), For: time.Since(start), Err: err}
}

func isPermanent(err error) bool {
	var p *backoff.PermanentError
	return errors.As(err, &p)
}

// isStopError reports whether err is a refusal that stops the node.
func isStopError(err error) bool {
	var (
		oc *OtherClusterError
		rr *RegistrationRefusedError
	)
	return errors.As(err, &oc) || errors.As(err, &rr)
}

// gcsLink is Run's state of the connection to the GCS (only Run's
// goroutine uses it).
type gcsLink struct {
	down    time.Time // when the outage was noticed; zero while the GCS answers
	next    time.Time // the next try during an outage
	b       *backoff.ExponentialBackOff
	lastErr error
	gaveUp  bool // the node stopped itself: no more calls
	// refresh asks refreshLoop for a refresh of the cluster view (one
	// pending at most: asks while one waits merge into it).
	refresh chan struct{}
}

func newGCSLink(period time.Duration) *gcsLink {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = period, max(period, gcsRetryMax)
	return &gcsLink{b: b, refresh: make(chan struct{}, 1)}
}

// askRefresh asks refreshLoop for a refresh of the cluster view, without
// waiting.
func (l *gcsLink) askRefresh() {
	select {
	case l.refresh <- struct{}{}:
	default: // one is already asked for
	}
}

// refreshLoop refreshes the cluster view whenever a report asks for it,
// until ctx ends or the node stops. Refreshes run here, not in Run's
// loop, so that a slow one (a GCS under load) never delays the heartbeat
// that keeps the node alive: a GCS that answers slowly must not turn
// into nodes declared dead.
func (r *Raylet) refreshLoop(ctx context.Context, l *gcsLink) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.closing:
			return
		case <-l.refresh:
			r.syncCluster(ctx)
		}
	}
}

// tick runs one report to the GCS: a heartbeat (or, during an outage, a
// retry once its backoff passed), a registration again when the GCS does
// not know the node, and, when the GCS answered, asks refreshLoop for the
// cluster view's refresh.
// It stops the node when the GCS is silent for the reconnect timeout or
// refuses the node.
func (r *Raylet) tick(ctx context.Context, l *gcsLink) {
	if l.gaveUp {
		return
	}
	now := time.Now()
	if !l.down.IsZero() {
		if silent := r.silentFor(now); silent >= r.reconnectTimeout {
			l.gaveUp = true
			r.stopWith(&GCSUnreachableError{Address: r.gcsAddress(), For: silent, Err: l.lastErr})
			return
		}
		if now.Before(l.next) {
			return
		}
	}
	err := r.heartbeat(ctx)
	if status.Code(err) == codes.NotFound {
		// A GCS restarted without the node's record, or with a record it
		// read back from its storage and waits for the node itself to
		// confirm (a restored node is not trusted until it proves it holds
		// the token): join it again, as the same node of the same cluster.
		r.log.Info("the GCS asks this node to register again (it restarted)", "gcs", r.gcsAddress(), "node_id", r.cfg.NodeID)
		if _, err = r.register(ctx); err == nil {
			r.log.Info("node registered again", "gcs", r.gcsAddress(), "node_id", r.cfg.NodeID)
		} else if isStopError(err) {
			l.gaveUp = true
			var p *backoff.PermanentError
			if errors.As(err, &p) {
				err = p.Unwrap()
			}
			r.stopWith(err)
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	now = time.Now()
	if err != nil {
		l.lastErr = err
		if l.down.IsZero() {
			l.down = now
			l.b.Reset()
			r.log.Warn("the GCS is unreachable; the node keeps serving and retries", "gcs", r.gcsAddress(), "error", err, "give_up_after", r.reconnectTimeout)
		} else {
			r.log.Debug("the GCS is still unreachable", "gcs", r.gcsAddress(), "error", err)
		}
		l.next = now.Add(l.b.NextBackOff())
		return
	}
	if !l.down.IsZero() {
		r.log.Info("the GCS is reachable again", "gcs", r.gcsAddress(), "outage", now.Sub(l.down).Round(time.Millisecond))
		l.down, l.lastErr = time.Time{}, nil
	}
	if l.gaveUp = r.Err() != nil; l.gaveUp {
		return
	}
	l.askRefresh()
}

// tellGCS makes a report the GCS must not miss (a worker's death, a job's
// end): tried at once, and when the GCS cannot be reached, tried again in
// the background (rpc.Retry: waiting for the GCS through an outage) until
// it takes it or Shutdown starts, so that a GCS back from a restart learns
// what happened while it was down. what names the report in logs.
func (r *Raylet) tellGCS(what string, call func(ctx context.Context, opts ...grpc.CallOption) error) {
	ctx, cancel := context.WithTimeout(context.Background(), gcsTimeout)
	err := call(ctx)
	cancel()
	switch status.Code(err) {
	case codes.OK:
		return
	case codes.Unavailable, codes.DeadlineExceeded:
	default:
		r.log.Warn(what+": the GCS refused it", "error", err)
		return
	}
	r.reportsMu.Lock()
	defer r.reportsMu.Unlock()
	if r.reportsClosed {
		r.log.Warn(what+": the GCS cannot be reached, and the node is stopping", "gcs", r.gcsAddress(), "error", err)
		return
	}
	r.log.Warn(what+": the GCS cannot be reached; trying again until it can", "gcs", r.gcsAddress(), "error", err)
	r.reports.Add(1)
	go func() {
		defer r.reports.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-r.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := rpc.Retry(ctx, r.gcsAddress(), what, call); err != nil {
			r.log.Warn(what+": given up", "error", err)
			return
		}
		r.log.Info(what + ": the GCS took it after all")
	}()
}
