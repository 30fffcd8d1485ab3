package core

import (
	"context"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/plugindial"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// directTransports are this process's own connections to its node's
// transport plugins. A call to a local plugin goes over one when it is
// ready, one process hop instead of two through the raylet
// (TransportInvoke); otherwise it goes through the raylet, as every call
// did before, while the connection is set up in the background. A plugin
// that restarts has a new socket and credentials: its old connection
// fails, is dropped, and the raylet is asked again.
type directTransports struct {
	mu     sync.Mutex
	m      map[string]*directPlugin
	closed bool
}

// directPlugin is the direct connection to one local plugin.
type directPlugin struct {
	conn     *grpc.ClientConn // nil: none yet, or dropped
	pid      int32            // the plugin process conn reaches
	ready    bool             // conn has been ready at least once
	fetching bool             // an endpoint request is under way
	retryAt  time.Time        // no new endpoint request before this
	// wait spaces endpoint requests that fail, or whose connection never
	// becomes ready (a plugin that refuses more connections, say): each
	// such failure waits longer, up to directRetryMax; a connection that
	// was ready starts it again.
	wait *backoff.ExponentialBackOff
}

// directRetry is how long a process first waits before asking its raylet
// again for an endpoint it could not get or use; each failure in a row
// doubles it, up to directRetryMax. Variables for tests.
var directRetry, directRetryMax = time.Second, 30 * time.Second

const (
	// directNever is how long it waits when the raylet will not tell (an
	// older raylet, a driver not on the node's unix socket).
	directNever = 1000 * time.Hour
	// endpointTimeout bounds one endpoint request.
	endpointTimeout = 10 * time.Second
)

// directIdle is how long a direct connection stays open without a call: a
// worker that stopped calling a plugin does not hold one of its
// connections (the next call goes through the raylet while the connection
// is made again). A variable for tests.
var directIdle = time.Minute

// directTransport returns a ready direct connection to this node's
// transport plugin name, or nil: the call then goes through the raylet.
// It never blocks: a connection that is not ready yet is being made (or
// its endpoint asked for) in the background.
func (cw *CoreWorker) directTransport(name string) *grpc.ClientConn {
	d := &cw.transports.direct
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	p := d.m[name]
	if p == nil {
		if d.m == nil {
			d.m = map[string]*directPlugin{}
		}
		p = &directPlugin{wait: backoff.NewExponentialBackOff()}
		p.wait.InitialInterval, p.wait.MaxInterval, p.wait.Multiplier = directRetry, directRetryMax, 2
		p.wait.Reset()
		d.m[name] = p
	}
	if p.conn != nil {
		switch p.conn.GetState() {
		case connectivity.Ready:
			if !p.ready {
				p.ready = true
				p.wait.Reset()
			}
			return p.conn
		case connectivity.Idle: // the plugin closed it, or it was never used
			p.conn.Connect()
			return nil
		case connectivity.Connecting:
			return nil
		default: // TransientFailure, Shutdown: the plugin is gone or restarted
			cw.log.Debug("dropping the direct connection to a transport plugin", "transport", name, "pid", p.pid, "state", p.conn.GetState())
			_ = p.conn.Close()
			if !p.ready { // refused, or never reachable: wait longer
				p.retryAt = time.Now().Add(p.wait.NextBackOff())
			}
			p.conn, p.ready = nil, false
		}
	}
	if !p.fetching && time.Now().After(p.retryAt) {
		p.fetching = true
		cw.wg.Add(1) // under d.mu while not closed: before Close waits
		go cw.fetchEndpoint(name, p)
	}
	return nil
}

// fetchEndpoint asks the raylet for plugin name's endpoint and starts
// connecting to it.
func (cw *CoreWorker) fetchEndpoint(name string, p *directPlugin) {
	defer cw.wg.Done()
	ctx, cancel := context.WithTimeout(cw.ctx, endpointTimeout)
	defer cancel()
	rep, err := cw.raylet.TransportEndpoint(ctx, &pb.TransportEndpointRequest{Name: name})
	var conn *grpc.ClientConn
	if err == nil {
		conn, err = plugindial.Dial(plugindial.Endpoint{
			Network: rep.GetNetwork(), Address: rep.GetAddress(),
			ClientCert: rep.GetClientCert(), ClientKey: rep.GetClientKey(), ServerCert: rep.GetServerCert(),
			Pid: int(rep.GetPid()),
		}, grpc.WithIdleTimeout(directIdle))
	}
	d := &cw.transports.direct
	d.mu.Lock()
	defer d.mu.Unlock()
	p.fetching = false
	if err != nil {
		switch status.Code(err) {
		case codes.Unimplemented, codes.PermissionDenied, codes.FailedPrecondition:
			p.retryAt = time.Now().Add(directNever)
		default:
			p.retryAt = time.Now().Add(p.wait.NextBackOff())
		}
		cw.log.Debug("calling a transport plugin through the raylet", "transport", name, "reason", err)
		return
	}
	if d.closed {
		_ = conn.Close()
		return
	}
	conn.Connect()
	p.conn, p.pid = conn, rep.GetPid()
	cw.log.Debug("calling a transport plugin directly", "transport", name, "pid", p.pid, "socket", rep.GetAddress())
}

// stopDirectTransports makes later calls go through the raylet and starts
// no more endpoint requests. Calls already on a direct connection go on:
// Close closes the connections (closeDirectTransports) only once its
// background work, which may be collecting tensors over them, is done.
func (cw *CoreWorker) stopDirectTransports() {
	d := &cw.transports.direct
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
}

// closeDirectTransports closes the direct connections (after
// stopDirectTransports).
func (cw *CoreWorker) closeDirectTransports() {
	d := &cw.transports.direct
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, p := range d.m {
		if p.conn != nil {
			_ = p.conn.Close()
			p.conn = nil
		}
	}
}
