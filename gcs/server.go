// Package gcs implements the global control service: the head node's
// in-memory tables of nodes, jobs, actors and placement groups plus a
// namespaced key-value store, served over gRPC as gorayv1.GcsServer.
//
// DrainNode (drain.go) forwards a node's drain before it is terminated to
// its raylet (over the same connections as placement groups) and marks
// the node draining in its view; heartbeats keep that flag current.
//
// Placement groups are placed by their own manager (placement.go), with
// its own lock: it chooses nodes with gcs/internal/placement and reserves
// the bundles on the raylets in two phases (prepare on every node, then
// commit; a failed prepare gives the others back), one group at a time,
// so two groups never hold parts of each other's resources.
//
// The GCS is never on the per-task path. Nodes register and send periodic
// heartbeats; Run declares a node dead after Options.FailureThreshold missed
// heartbeat periods, and every actor on a dead node dies with it or, with
// restarts left, restarts.
//
// Open keeps the tables in a storage backend (storage.go: bbolt, Redis or
// memory): every change is written through, in order, before the call that
// made it is acknowledged (journal.go), and a GCS opened on the same storage
// reads the cluster back (its id, nodes, jobs, actors, placement groups and
// KV), checking every record as strictly as the live call that made it
// and setting aside those that fail (restore.go). A restored node that was
// alive gets the health timeout to come back, and is not dialled, nor
// shown in views, until it registers again with the token: the storage
// alone does not vouch for an address. A GCS that died during a
// reservation may have left raylets holding bundles the restored table
// does not place there: the placement group manager sweeps every node that
// registers again, telling its raylet which bundles are in use so that it
// releases the others (sweep.go).
package gcs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/gcs/internal/store"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Defaults for Options.
const (
	DefaultHeartbeatPeriod  = time.Second
	DefaultFailureThreshold = 5
)

// Node and job states as stored in NodeInfo.state and JobInfo.state.
const (
	StateAlive    = "ALIVE"
	StateDead     = "DEAD"
	StateRunning  = "RUNNING"
	StateFinished = "FINISHED"
)

// Options configures a Server. The zero value uses the defaults.
type Options struct {
	// HeartbeatPeriod is how often nodes must report; it is returned to
	// nodes in RegisterNodeReply. Default 1s.
	HeartbeatPeriod time.Duration
	// FailureThreshold is how many periods without a heartbeat make a node
	// DEAD. Default 5.
	FailureThreshold int
	// Logger receives the server's logs; nil discards them.
	Logger hclog.Logger
	// Now returns the current time; nil means time.Now. For tests.
	Now func() time.Time
	// KV bounds the key-value store; zero fields take the defaults.
	KV KVLimits
	// Reserver reserves placement group bundles on raylets; nil leaves
	// every group PENDING (unit tests of other tables).
	Reserver BundleReserver
	// Drainer drains nodes' raylets for DrainNode; nil takes the
	// Reserver when it drains too (a *RayletReserver does), and without
	// either DrainNode fails with ErrNoRaylets.
	Drainer NodeDrainer
	// Storage is where Open keeps the tables (New keeps them in memory
	// only).
	Storage Storage
	// TaskEvents bounds the task event store (taskevents.go).
	TaskEvents TaskEventLimits
	// History caps the dead nodes, dead actors, finished jobs, removed
	// placement groups and task attempts kept (history.go); its
	// TaskEvents sets TaskEvents.MaxTasks when that is zero.
	History HistoryLimits
	// Token is the cluster's token ("" with auth disabled): jobs' env is
	// written to the storage sealed with a key derived from it
	// (envcrypt.go), and not written at all without one.
	Token string
}

// Server is the GCS. Create it with New, expose it with Register and run the
// health checks with Run. All methods are safe for concurrent use.
type Server struct {
	gorayv1.UnimplementedGcsServer

	period    time.Duration
	threshold int
	log       hclog.Logger
	now       func() time.Time

	mu        sync.Mutex
	nodes     map[ids.ID]*nodeEntry
	nodeOrder []ids.ID
	jobs      map[ids.ID]*gorayv1.JobInfo
	jobOrder  []ids.ID
	actors    map[ids.ID]*actorEntry
	actorSeq  []ids.ID
	// byName maps an actor's namespace and name to the actor holding it,
	// which is never DEAD: an actor's death frees its name.
	byName map[nsName]ids.ID
	subs   map[*subscriber]struct{}
	// changes numbers the changes of nodes' views (nodeversions.go).
	changes nodeChanges
	// grace is the extra silence the last health check allowed (health.go).
	grace time.Duration

	kvMu     sync.Mutex
	kv       map[string]map[string][]byte
	kvLimits KVLimits
	kvUse    map[string]*kvUsage // by namespace, for the quotas
	kvTotal  int64               // bytes of all namespaces

	// waiters counts GetActor calls blocked in wait_alive (for tests).
	waiters atomic.Int64

	// pgs is the placement group manager, with its own lock.
	pgs *placementGroups
	// drainer forwards DrainNode to raylets (nil: none).
	drainer NodeDrainer
	// taskEvents keeps the task events processes report, with its own
	// lock (taskevents.go).
	taskEvents *taskEventStore

	// storage and journal keep the tables across restarts (nil without
	// storage); clusterID is kept there too.
	storage   store.Store
	journal   *journal
	clusterID string
	restored  bool
	started   time.Time

	// clusterName is the cluster's name, kept in the storage's meta table
	// with its id; discarded is the stored cluster Open discarded for a
	// new one (lifecycle.go).
	clusterName string
	discarded   string

	// envSealer seals jobs' env for the storage (nil: no token);
	// setAside counts the records the storage keeps in its quarantine
	// table (restore.go).
	envSealer *envSealer
	setAside  int64

	// hist is the bounded history (history.go), guarded by mu;
	// restoring is the restore under way, whose batch takes what the
	// history drops before the journal starts.
	hist      history
	restoring *restorer
}

var _ gorayv1.GcsServer = (*Server)(nil)

// New returns a server with empty tables.
func New(opts Options) *Server {
	if opts.HeartbeatPeriod <= 0 {
		opts.HeartbeatPeriod = DefaultHeartbeatPeriod
	}
	if opts.FailureThreshold <= 0 {
		opts.FailureThreshold = DefaultFailureThreshold
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{
		period:    opts.HeartbeatPeriod,
		threshold: opts.FailureThreshold,
		log:       opts.Logger,
		now:       opts.Now,
		nodes:     map[ids.ID]*nodeEntry{},
		jobs:      map[ids.ID]*gorayv1.JobInfo{},
		actors:    map[ids.ID]*actorEntry{},
		byName:    map[nsName]ids.ID{},
		subs:      map[*subscriber]struct{}{},
		kv:        map[string]map[string][]byte{},
		kvLimits:  opts.KV.withDefaults(),
		kvUse:     map[string]*kvUsage{},
		started:   opts.Now(),
		clusterID: ids.New().String(),
		changes:   newNodeChanges(maxNodeChanges),
	}
	s.hist.limits = opts.History.withDefaults()
	if opts.TaskEvents.MaxTasks <= 0 {
		opts.TaskEvents.MaxTasks = s.hist.limits.TaskEvents
	}
	s.pgs = newPlacementGroups(s, opts.Reserver, opts.Logger, opts.HeartbeatPeriod)
	s.taskEvents = newTaskEventStore(opts.TaskEvents)
	s.drainer = drainerOf(opts)
	return s
}

// Register registers the Gcs and TaskEventService services on g.
func (s *Server) Register(g *grpc.Server) {
	gorayv1.RegisterGcsServer(g, s)
	gorayv1.RegisterTaskEventServiceServer(g, &taskEventService{store: s.taskEvents})
}

// Run checks node health once per heartbeat period, and places placement
// groups, until ctx is done.
func (s *Server) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.pgs.run(ctx)
	}()
	defer func() { <-done }()
	t := time.NewTicker(s.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.checkHealth()
		}
	}
}

// Nodes returns a snapshot of every node (alive and dead) in registration
// order, as GetAllNodes shows them: without the alive nodes known only
// from the storage (restore.go).
func (s *Server) Nodes() []*gorayv1.NodeView {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*gorayv1.NodeView, 0, len(s.nodeOrder))
	for _, id := range s.nodeOrder {
		if n := s.nodes[id]; n.viewableLocked() {
			out = append(out, n.viewLocked())
		}
	}
	return out
}

// Jobs returns a snapshot of every job in the order they were added.
func (s *Server) Jobs() []*gorayv1.JobInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*gorayv1.JobInfo, 0, len(s.jobOrder))
	for _, id := range s.jobOrder {
		out = append(out, cloneMsg(s.jobs[id]))
	}
	return out
}

// Actors returns a snapshot of every actor in registration order.
func (s *Server) Actors() []*gorayv1.ActorInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*gorayv1.ActorInfo, 0, len(s.actorSeq))
	for _, id := range s.actorSeq {
		out = append(out, cloneMsg(s.actors[id].info))
	}
	return out
}

func cloneMsg[T proto.Message](m T) T {
	return proto.Clone(m).(T)
}

func (s *Server) nowMs() int64 { return s.now().UnixMilli() }
