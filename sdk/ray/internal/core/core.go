// Package core is the core worker: the part of goray that runs inside every
// driver and worker process. It owns objects (reference counts, values,
// locations), submits tasks to leased workers and actors, and, in workers,
// executes tasks. sdk/ray is its typed front end.
package core

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/connlimit"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/objstore"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
)

// Mode says whether the process is a driver or a worker.
type Mode int

// Modes.
const (
	ModeDriver Mode = iota
	ModeWorker
)

// Config configures Start.
type Config struct {
	Mode         Mode
	RayletSocket string
	SessionDir   string
	// NodeIP is the address the process listens on for other nodes
	// (default 127.0.0.1).
	NodeIP string
	// WorkerID is set by the raylet for workers; drivers get a new one.
	WorkerID ids.ID
	// Job describes a driver's job (binary, env, working dir).
	Job *pb.JobInfo
	// Namespace is the job's namespace, where its named actors live.
	Namespace string
	Logger    hclog.Logger
	// OnRayletLost is called when the raylet connection breaks (workers
	// exit; drivers fail pending work).
	OnRayletLost func(error)
	// TransferTimeout bounds one tensor transfer (default
	// DefaultTransferTimeout).
	TransferTimeout time.Duration
	// Auth is the cluster's credentials: presented on every call this
	// process makes and required of every caller of its CoreWorker service
	// (nil: none, for tests of a cluster without authentication).
	Auth *auth.Credentials
	// LogStdout and LogStderr, in a driver, receive the lines its job's
	// workers print on stdout and stderr, prefixed (logs.go); nil
	// LogStdout turns that off, nil LogStderr sends both to LogStdout.
	LogStdout, LogStderr io.Writer
}

// CoreWorker is the per-process runtime.
type CoreWorker struct {
	cfg    Config
	log    hclog.Logger
	mode   Mode
	id     ids.ID
	jobID  ids.ID
	nodeID ids.ID
	addr   *pb.Address
	idgen  *ids.Generator

	// fetches are Wait's pulls of objects to this node (fetchlocal.go).
	fetches fetcher
	// workDirs are the working dirs this process installed (workingdir.go).
	workDirs workDirs

	node        *pb.NodeInfo
	inlineLimit int64
	gcsAddr     string

	lis      net.Listener
	tcpLis   net.Listener
	server   *grpc.Server
	rayletCC *grpc.ClientConn
	raylet   pb.RayletClient
	gcsCC    *grpc.ClientConn
	gcs      pb.GcsClient
	store    *objstore.Mapping

	objects    *objectTable
	transports transportClients

	// Worker mode: the session stream (for owns_objects reports) and the
	// count of goroutines blocked in Get/Wait inside tasks.
	session   pb.Raylet_WorkerSessionClient
	sessionMu sync.Mutex
	ownsKick  chan struct{}
	blockMu   sync.Mutex
	blockedN  int
	submitter *submitter
	actors    *actorManager
	exec      *executor
	// events buffers task events for the GCS (nil without a GCS).
	events *taskEventBuffer

	nodeDir nodeDirectory
	logs    *logPrinter // a driver's printer of its workers' output

	connsMu sync.Mutex
	conns   map[string]*grpc.ClientConn
	connOf  map[string]string // worker id -> conns key
	// connNode: the node of each connection bound to one (nodedeath.go).
	connNode map[string]ids.ID
	// keepalive of the connections to other core workers
	// (rpc.KeepaliveFromEnv; the zero value: rpc.DefaultKeepalive).
	keepalive rpc.Keepalive

	ctx    context.Context
	cancel context.CancelFunc
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

// Start connects to the node's raylet, registers the process and serves the
// CoreWorker service. It returns once the process is registered.
func Start(ctx context.Context, cfg Config) (*CoreWorker, error) {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	cw := &CoreWorker{
		cfg:      cfg,
		log:      log,
		mode:     cfg.Mode,
		id:       cfg.WorkerID,
		idgen:    ids.NewGenerator(),
		conns:    map[string]*grpc.ClientConn{},
		connOf:   map[string]string{},
		closed:   make(chan struct{}),
		ownsKick: make(chan struct{}, 1),
	}
	if cw.id.IsNil() {
		cw.id = ids.New()
	}
	cw.ctx, cw.cancel = context.WithCancel(context.Background())
	cw.objects = newObjectTable(cw)
	cw.submitter = newSubmitter(cw)
	cw.actors = newActorManager(cw)
	cw.exec = newExecutor(cw)

	if cfg.Mode == ModeWorker {
		// Tasks may arrive as soon as the raylet knows the worker, before
		// Start returns; references decoded by them need the process's core
		// worker.
		current.Store(cw)
	}
	if err := cw.start(ctx); err != nil {
		current.CompareAndSwap(cw, nil)
		cw.Close()
		return nil, err
	}
	current.Store(cw)
	return cw, nil
}

var current atomic.Pointer[CoreWorker]

// Current returns the process's core worker, or nil before Start and after
// Close.
func Current() *CoreWorker { return current.Load() }

func (cw *CoreWorker) start(ctx context.Context) error {
	ka, err := rpc.KeepaliveFromEnv()
	if err != nil {
		return err
	}
	cw.keepalive = ka
	cw.trackSegments()
	sockDir := filepath.Join(cw.cfg.SessionDir, "sockets")
	if err := os.MkdirAll(sockDir, 0o700); err != nil {
		return fmt.Errorf("goray: creating socket dir: %w", err)
	}
	kind := "driver"
	if cw.mode == ModeWorker {
		kind = "worker"
	}
	path := filepath.Join(sockDir, fmt.Sprintf("%s-%s.sock", kind, cw.id.String()[:16]))
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("goray: listening on %s: %w", path, err)
	}
	cw.lis = lis
	ip := cw.cfg.NodeIP
	if ip == "" {
		ip = "127.0.0.1"
	}
	tcpLis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("goray: listening on %s for other nodes: %w", ip, err)
	}
	// Callers from other nodes must show the token: until they do, their
	// connections are bounded (internal/connlimit).
	cw.tcpLis = connlimit.Wrap(tcpLis, connlimit.Options{Name: "core worker gRPC", Logger: cw.log})
	cw.server = grpc.NewServer(append(rpc.ServerOptions(cw.cfg.Auth), peerServerOptions()...)...)
	pb.RegisterCoreWorkerServer(cw.server, &coreWorkerService{cw: cw})
	cw.addr = &pb.Address{WorkerId: cw.id.Bytes(), UnixPath: path, TcpAddr: cw.tcpLis.Addr().String()}

	cc, err := rpc.Dial(cw.cfg.RayletSocket, cw.cfg.Auth, peerDialOptions()...)
	if err != nil {
		return fmt.Errorf("goray: connecting to raylet at %s: %w", cw.cfg.RayletSocket, err)
	}
	cw.rayletCC = cc
	cw.raylet = pb.NewRayletClient(cc)
	if err := cw.subscribeLogs(ctx); err != nil {
		return err
	}

	reg, err := cw.openSession(ctx)
	if err != nil {
		return err
	}
	cw.node = reg.Node
	cw.nodeID = ids.MustFromBytes(reg.Node.GetNodeId())
	cw.addr.NodeId = cw.nodeID.Bytes()
	cw.jobID = ids.MustFromBytes(reg.JobId)
	cw.inlineLimit = reg.Store.GetInlineLimit()
	if cw.inlineLimit <= 0 {
		cw.inlineLimit = 100 << 10
	}
	cw.gcsAddr = reg.GcsAddress
	if cw.gcsAddr != "" {
		gcc, err := dialGCS(cw.gcsAddr, cw.cfg.Auth)
		if err != nil {
			return fmt.Errorf("goray: connecting to GCS at %s: %w", cw.gcsAddr, err)
		}
		cw.gcsCC = gcc
		cw.gcs = pb.NewGcsClient(gcc)
	}
	cw.startTaskEvents(os.Getpid())
	if fs := reg.Store.GetFdSocket(); fs != "" {
		m, err := objstore.Map(ctx, fs)
		if err != nil {
			return fmt.Errorf("goray: mapping the object store: %w", err)
		}
		cw.store = m
	}
	if cw.mode == ModeWorker {
		cw.wg.Add(1)
		go func() { defer cw.wg.Done(); cw.reportOwnership() }()
	}
	cw.wg.Add(2)
	go func() { defer cw.wg.Done(); cw.objects.flushLoop() }()
	// Serve only now: the raylet may lease this worker as soon as it is
	// registered, and callers' connections wait in the listen backlog until
	// the process knows its node, job, store and GCS.
	cw.wg.Add(1)
	go func() { defer cw.wg.Done(); _ = cw.server.Serve(lis) }()
	go func() { defer cw.wg.Done(); _ = cw.server.Serve(cw.tcpLis) }()
	return nil
}

// openSession registers with the raylet over a session stream and watches
// it for the rest of the process's life.
func (cw *CoreWorker) openSession(ctx context.Context) (*pb.RayletCommand, error) {
	type sessionStream interface {
		Recv() (*pb.RayletCommand, error)
	}
	var st sessionStream
	if cw.mode == ModeWorker {
		s, err := cw.raylet.WorkerSession(cw.ctx)
		cw.session = s
		if err != nil {
			return nil, fmt.Errorf("goray: opening worker session: %w", err)
		}
		if err := s.Send(&pb.WorkerMessage{WorkerId: cw.id.Bytes(), Address: cw.addr, Pid: int32(os.Getpid())}); err != nil {
			return nil, fmt.Errorf("goray: registering worker: %w", err)
		}
		st = s
	} else {
		job := cw.cfg.Job
		if job == nil {
			job = &pb.JobInfo{}
		}
		job.DriverPid = int32(os.Getpid())
		s, err := cw.raylet.DriverSession(cw.ctx)
		if err != nil {
			return nil, fmt.Errorf("goray: opening driver session: %w", err)
		}
		if err := s.Send(&pb.DriverMessage{Job: job, Address: cw.addr, Pid: int32(os.Getpid())}); err != nil {
			return nil, fmt.Errorf("goray: registering driver: %w", err)
		}
		st = s
	}
	type result struct {
		cmd *pb.RayletCommand
		err error
	}
	first := make(chan result, 1)
	go func() {
		cmd, err := st.Recv()
		first <- result{cmd, err}
	}()
	var reg *pb.RayletCommand
	select {
	case r := <-first:
		if r.err != nil {
			return nil, fmt.Errorf("goray: raylet refused registration: %w", r.err)
		}
		reg = r.cmd
	case <-ctx.Done():
		return nil, fmt.Errorf("goray: waiting for the raylet to register this process: %w", ctx.Err())
	}
	cw.wg.Add(1)
	go func() {
		defer cw.wg.Done()
		for {
			cmd, err := st.Recv()
			if err != nil {
				if cw.ctx.Err() == nil && cw.cfg.OnRayletLost != nil {
					cw.cfg.OnRayletLost(err)
				}
				return
			}
			switch cmd.Kind {
			case pb.RayletCommand_EXIT:
				if cw.cfg.OnRayletLost != nil {
					cw.cfg.OnRayletLost(fmt.Errorf("raylet asked this process to exit: %s", cmd.Reason))
				}
				return
			case pb.RayletCommand_WORKER_DIED:
				cw.peerDied(cmd.WorkerId)
			case pb.RayletCommand_NODE_DIED:
				if id, err := ids.FromBytes(cmd.NodeId); err == nil {
					cw.log.Warn("a node of the cluster died", "node", id.Short(), "reason", cmd.Reason)
					cw.markNodeDead(id, cmd.Reason)
					cw.objects.nodeDied(cmd.NodeId)
				}
			}
		}
	}()
	return reg, nil
}

// reportOwnership tells the raylet whether this worker owns objects, so an
// owner is never reaped as an idle worker.
func (cw *CoreWorker) reportOwnership() {
	last := false
	for {
		select {
		case <-cw.ctx.Done():
			return
		case <-cw.ownsKick:
		}
		owns := cw.objects.ownsAny()
		if owns == last {
			continue
		}
		cw.sessionMu.Lock()
		err := cw.session.Send(&pb.WorkerMessage{WorkerId: cw.id.Bytes(), OwnsObjects: owns})
		cw.sessionMu.Unlock()
		if err != nil {
			return
		}
		last = owns
	}
}

// blocked is called around a wait inside a task: while any goroutine of a
// worker waits, the raylet lends the worker's CPU to other tasks (nested
// tasks would deadlock otherwise). It returns the function ending the wait.
func (cw *CoreWorker) blocked() func() {
	if cw.mode != ModeWorker || cw.raylet == nil {
		return func() {}
	}
	cw.notifyBlocked(+1)
	return func() { cw.notifyBlocked(-1) }
}

func (cw *CoreWorker) notifyBlocked(delta int) {
	cw.blockMu.Lock()
	defer cw.blockMu.Unlock()
	before := cw.blockedN
	cw.blockedN += delta
	if (before == 0) == (cw.blockedN == 0) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cw.raylet.NotifyTaskBlocked(ctx, &pb.TaskBlockedRequest{WorkerId: cw.id.Bytes(), Blocked: cw.blockedN > 0}); err != nil {
		cw.log.Debug("reporting a blocked task failed", "error", err)
	}
}

// ID returns the process's worker id.
func (cw *CoreWorker) ID() ids.ID { return cw.id }

// JobID returns the job id.
func (cw *CoreWorker) JobID() ids.ID { return cw.jobID }

// NodeID returns the id of the node the process runs on.
func (cw *CoreWorker) NodeID() ids.ID { return cw.nodeID }

// Address returns where this process serves.
func (cw *CoreWorker) Address() *pb.Address { return cw.addr }

// Mode returns the process mode.
func (cw *CoreWorker) Mode() Mode { return cw.mode }

// GCS returns the GCS client (nil when the raylet did not give an address).
func (cw *CoreWorker) GCS() pb.GcsClient { return cw.gcs }

// Credentials returns what this process presents to the cluster (nil when
// started without), for other clients of the same cluster in this process
// (a second node started by the microbenchmark, say).
func (cw *CoreWorker) Credentials() *auth.Credentials { return cw.cfg.Auth }

// Raylet returns the local raylet client.
func (cw *CoreWorker) Raylet() pb.RayletClient { return cw.raylet }

// conn returns a cached client connection to another core worker.
func (cw *CoreWorker) conn(addr *pb.Address) (*grpc.ClientConn, error) {
	target := addr.GetUnixPath()
	if target == "" || (len(addr.NodeId) > 0 && !cw.nodeID.IsNil() && string(addr.NodeId) != string(cw.nodeID[:]) && addr.TcpAddr != "") {
		target = addr.GetTcpAddr()
	}
	if target == "" {
		return nil, errors.New("goray: address has neither a unix path nor a TCP address")
	}
	node := cw.peerNode(addr, target)
	cw.connsMu.Lock()
	defer cw.connsMu.Unlock()
	if !node.IsNil() {
		if dead, reason := cw.nodeDead(node); dead {
			return nil, deadNodeError(node, reason, nil)
		}
	}
	if c, ok := cw.conns[target]; ok {
		return c, nil
	}
	c, err := rpc.Dial(target, cw.cfg.Auth, cw.peerConnOptions(node)...)
	if err != nil {
		return nil, err
	}
	cw.conns[target] = c
	if !node.IsNil() {
		if cw.connNode == nil {
			cw.connNode = map[string]ids.ID{}
		}
		cw.connNode[target] = node
	}
	if len(addr.WorkerId) > 0 {
		cw.connOf[string(addr.WorkerId)] = target
	}
	return c, nil
}

// peerDied is called when the raylet reports that a process of this node
// died: it no longer borrows anything, and its connection is closed.
func (cw *CoreWorker) peerDied(worker []byte) {
	cw.objects.borrowerDied(worker)
	cw.connsMu.Lock()
	target, ok := cw.connOf[string(worker)]
	var c *grpc.ClientConn
	if ok {
		c = cw.conns[target]
		delete(cw.conns, target)
		delete(cw.connOf, string(worker))
	}
	cw.connsMu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// peer returns a CoreWorker client for addr.
func (cw *CoreWorker) peer(addr *pb.Address) (pb.CoreWorkerClient, error) {
	c, err := cw.conn(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewCoreWorkerClient(c), nil
}

func (cw *CoreWorker) isSelf(addr *pb.Address) bool {
	return addr != nil && string(addr.WorkerId) == string(cw.id[:])
}

// Close stops the core worker: pending work fails with ErrShutdown, the
// server stops and connections close. It is idempotent.
func (cw *CoreWorker) Close() {
	cw.once.Do(func() {
		current.CompareAndSwap(cw, nil)
		close(cw.closed)
		if cw.objects != nil && cw.raylet != nil {
			// Whatever was released before Close is freed now, not lost
			// with the background loop.
			cw.objects.flushFrees()
			cw.objects.collectAllTensors()
			// Bounded: a frozen plugin must not hold Close up.
			gctx, gcancel := context.WithTimeout(context.Background(), 10*time.Second)
			cw.objects.flushTensorGC(gctx, true)
			gcancel()
		}
		cw.releaseSegments()
		cw.stopDirectTransports()
		cw.cancel()
		cw.stopLogs()
		if cw.submitter != nil {
			cw.submitter.close()
		}
		if cw.actors != nil {
			cw.actors.close()
		}
		if cw.server != nil {
			stopped := make(chan struct{})
			go func() { cw.server.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(2 * time.Second):
				cw.server.Stop()
			}
		}
		for _, l := range []net.Listener{cw.lis, cw.tcpLis} {
			if l != nil {
				_ = l.Close() // in case Serve never ran
			}
		}
		cw.connsMu.Lock()
		for _, c := range cw.conns {
			_ = c.Close()
		}
		cw.conns = map[string]*grpc.ClientConn{}
		cw.connsMu.Unlock()
		cw.stopTaskEvents(2 * time.Second) // the last events, before the GCS connection goes
		if cw.gcsCC != nil {
			_ = cw.gcsCC.Close()
		}
		// The flush loop may be sending frees and tensor collections: let it
		// finish before the raylet connection goes.
		cw.wg.Wait()
		cw.closeDirectTransports()
		if cw.rayletCC != nil {
			_ = cw.rayletCC.Close()
		}
		if cw.store != nil {
			_ = cw.store.Close()
		}
		if cw.addr != nil && cw.addr.UnixPath != "" {
			_ = os.Remove(cw.addr.UnixPath)
		}
	})
}

// Closed is closed when Close starts.
func (cw *CoreWorker) Closed() <-chan struct{} { return cw.closed }
