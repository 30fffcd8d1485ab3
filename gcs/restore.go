package gcs

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/gcs/internal/store"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// Reading the cluster back from the storage. The storage is a trust
// boundary: whoever can write to Redis (or the bbolt file) must not be
// able to crash the GCS, get the cluster's token sent to an address of
// theirs, or get past a limit a live request is held to. So every record
// read back passes the checks of the live handler that would have made it
// (RegisterNode's, AddJob's, RegisterActor's, CreatePlacementGroup's,
// KVPut's, quotas included) plus those of the fields the GCS sets itself
// (states, the record's key, names held once); a record that fails them,
// or cannot be decoded, is set aside: moved, in one atomic batch with the
// others, to the storage's quarantine table for an operator to inspect,
// logged, counted in goray_gcs_storage_records_set_aside and in `goray
// status`. It is never fatal.
//
// A node read back is only a record: the GCS does not dial it, nor tell
// anyone its addresses, until the node itself registers again (with the
// token, like every call) and its own registration replaces the stored
// record. Its heartbeats are answered NodeUnverifiedError (NotFound), on
// which a raylet registers again; one that never does is declared dead by
// the health check, as before.

// tableQuarantine holds the records set aside at restores, keyed by
// their table and key ("nodes/<key>"), each a quarantineRecord in JSON.
const tableQuarantine = "quarantine"

// maxStoredRecord bounds a record read back: no live request can make a
// larger one (the GCS reads at most 16 MiB per call, a KV value is at
// most 8 MiB).
const maxStoredRecord = 16 << 20

// quarantineRecord is a record set aside: where it was, why, when, and
// its bytes as they were.
type quarantineRecord struct {
	Table      string `json:"table"`
	Key        string `json:"key"`
	Reason     string `json:"reason"`
	SetAsideAt string `json:"set_aside_at"`
	// Value is the record's bytes (base64 in the JSON).
	Value []byte `json:"value"`
	// Kept says the record stayed in its table (a job whose env could
	// not be opened: the job is kept without its env).
	Kept bool `json:"kept,omitempty"`
}

// StoredRecordError says why a record read back from the storage was set
// aside: the table and key it had, and the check it failed (Err, often an
// *InvalidArgumentError as the live handler returns).
type StoredRecordError struct {
	Table, Key string
	Err        error
}

func (e *StoredRecordError) Error() string {
	return fmt.Sprintf("GCS storage: %s record %q: %v", e.Table, clip(e.Key), e.Err)
}

// Unwrap returns the check that failed.
func (e *StoredRecordError) Unwrap() error { return e.Err }

// NodeUnverifiedError refuses a heartbeat of a node the GCS knows only
// from its storage: the node must register again, proving it holds the
// token and bringing its own addresses (codes.NotFound, on which a raylet
// registers again), and DrainNode of such a node (the GCS does not dial
// it yet).
type NodeUnverifiedError struct {
	ID ids.ID
	Op string // "heartbeat", "drain"
}

func (e *NodeUnverifiedError) Error() string {
	return fmt.Sprintf("%s of node %s: the GCS knows the node only from its storage (it restarted) until the node registers again", e.Op, e.ID)
}

// GRPCStatus maps the error to codes.NotFound for a heartbeat (the raylet
// registers again) and codes.Unavailable otherwise (try again later).
func (e *NodeUnverifiedError) GRPCStatus() *status.Status {
	if e.Op == "heartbeat" {
		return status.New(codes.NotFound, e.Error())
	}
	return status.New(codes.Unavailable, e.Error())
}

// restorer collects what a restore sets aside.
type restorer struct {
	s     *Server
	at    string
	batch []store.Write
}

// setAside moves (or with kept, copies) a record to the quarantine table
// and logs why.
func (r *restorer) setAside(table, key string, value []byte, why error, kept bool) {
	rec := quarantineRecord{Table: table, Key: key, Reason: why.Error(), SetAsideAt: r.at, Value: value, Kept: kept}
	b, err := json.Marshal(rec)
	if err != nil {
		panic(fmt.Sprintf("gcs: marshalling a quarantine record: %v", err)) // strings and bytes always marshal
	}
	r.batch = append(r.batch, store.Write{Table: tableQuarantine, Key: table + "/" + key, Value: b})
	if !kept {
		r.batch = append(r.batch, store.Write{Table: table, Key: key, Delete: true})
	}
	r.s.log.Error("GCS storage: a record read back failed its checks; it is set aside in the quarantine table",
		"table", table, "key", clip(key), "reason", why, "quarantine", tableQuarantine)
}

// records reads table's records in key order, setting aside those larger
// than maxStoredRecord.
func (r *restorer) records(ctx context.Context, table string) ([]string, map[string][]byte, error) {
	recs, err := r.s.storage.GetAll(ctx, table)
	if err != nil {
		return nil, nil, err
	}
	keys := slices.Sorted(maps.Keys(recs))
	out := keys[:0]
	for _, k := range keys {
		if n := len(recs[k]); n > maxStoredRecord {
			r.setAside(table, k, recs[k], &StoredRecordError{Table: table, Key: k, Err: fmt.Errorf("%d bytes, more than the %d any call can make", n, maxStoredRecord)}, false)
			continue
		}
		out = append(out, k)
	}
	return out, recs, nil
}

// load decodes and checks every record of table with add, in key order;
// a record that does not decode or that add refuses is set aside.
func load[M proto.Message](ctx context.Context, r *restorer, table string, newMsg func() M, add func(key string, raw []byte, m M) error) error {
	keys, recs, err := r.records(ctx, table)
	if err != nil {
		return err
	}
	for _, k := range keys {
		m := newMsg()
		if err := proto.Unmarshal(recs[k], m); err != nil {
			r.setAside(table, k, recs[k], &StoredRecordError{Table: table, Key: k, Err: fmt.Errorf("cannot be decoded: %w", err)}, false)
			continue
		}
		if err := add(k, recs[k], m); err != nil {
			r.setAside(table, k, recs[k], &StoredRecordError{Table: table, Key: k, Err: err}, false)
		}
	}
	return nil
}

// keyIs checks that a record's key is its id's, as the GCS writes it.
func keyIs(key string, id ids.ID) error {
	if key != id.String() {
		return fmt.Errorf("the record is keyed %q but holds id %s", clip(key), id)
	}
	return nil
}

// restore reads every table back into the server, setting aside what
// fails its checks (see above).
func (s *Server) restore(ctx context.Context) error {
	r := &restorer{s: s, at: s.now().UTC().Format(time.RFC3339)}
	meta, err := s.storage.GetAll(ctx, tableMeta)
	if err != nil {
		return err
	}
	if id, ok := meta[metaClusterID]; ok {
		if _, err := ids.Parse(string(id)); err != nil {
			r.setAside(tableMeta, metaClusterID, id, &StoredRecordError{Table: tableMeta, Key: metaClusterID, Err: err}, false)
		} else {
			s.clusterID = string(id)
			s.restored = true
		}
	}
	if name, ok := meta[metaClusterName]; ok {
		if err := checkClusterName(string(name)); err != nil {
			r.setAside(tableMeta, metaClusterName, name, &StoredRecordError{Table: tableMeta, Key: metaClusterName, Err: err}, false)
		}
	}
	if err := s.restoreNodes(ctx, r); err != nil {
		return err
	}
	if err := s.restoreJobs(ctx, r); err != nil {
		return err
	}
	if err := s.restoreActors(ctx, r); err != nil {
		return err
	}
	if err := s.restoreKV(ctx, r); err != nil {
		return err
	}
	if err := s.restoreGroups(ctx, r); err != nil {
		return err
	}
	s.restoreHistory(r, meta) // the caps hold across restarts (history.go)
	if len(r.batch) > 0 {
		if err := s.storage.Apply(ctx, r.batch); err != nil {
			return fmt.Errorf("setting aside the records that failed their checks: %w", err)
		}
	}
	q, err := s.storage.GetAll(ctx, tableQuarantine)
	if err != nil {
		return err
	}
	s.setAside = int64(len(q))
	if s.setAside > 0 {
		s.log.Warn("GCS storage: records are set aside in the quarantine table; inspect them, then delete them (docs/security.md)",
			"records", s.setAside, "table", tableQuarantine, "storage", s.storage.Describe())
	}
	return nil
}

// restoreNodes reads the node table back. A node's record passes
// RegisterNode's checks; every node read back is unverified until it
// registers again (fromStorage).
func (s *Server) restoreNodes(ctx context.Context, r *restorer) error {
	now := s.now()
	err := load(ctx, r, tableNodes, func() *gorayv1.NodeInfo { return &gorayv1.NodeInfo{} }, func(key string, _ []byte, info *gorayv1.NodeInfo) error {
		id, err := parseID("node.node_id", info.GetNodeId())
		if err != nil {
			return err
		}
		if err := keyIs(key, id); err != nil {
			return err
		}
		if err := checkNodeInfo(info); err != nil {
			return err
		}
		if st := info.GetState(); st != StateAlive && st != StateDead {
			return &InvalidArgumentError{Field: "node.state", Problem: fmt.Sprintf("%q is neither %s nor %s", clip(st), StateAlive, StateDead)}
		}
		// An alive node has the health timeout from now to come back.
		n := &nodeEntry{info: info, lastHeartbeat: now, fromStorage: true}
		if info.GetTotal() != nil {
			n.available = cloneMsg(info.GetTotal())
		}
		s.nodes[id] = n
		s.nodeOrder = append(s.nodeOrder, id)
		return nil
	})
	sortByTime(s.nodeOrder, func(id ids.ID) int64 { return s.nodes[id].info.GetStartTimeMs() })
	return err
}

// restoreJobs reads the job table back: AddJob's checks, a known state,
// and the env opened with the cluster's token (a job whose env cannot be
// opened is kept without it, its record copied aside).
func (s *Server) restoreJobs(ctx context.Context, r *restorer) error {
	err := load(ctx, r, tableJobs, func() *gorayv1.JobInfo { return &gorayv1.JobInfo{} }, func(key string, raw []byte, j *gorayv1.JobInfo) error {
		id, err := checkJobInfo(j)
		if err != nil {
			return err
		}
		if err := keyIs(key, id); err != nil {
			return err
		}
		if st := j.GetState(); st != StateRunning && st != StateFinished {
			return &InvalidArgumentError{Field: "job.state", Problem: fmt.Sprintf("%q is neither %s nor %s", clip(st), StateRunning, StateFinished)}
		}
		var envErr error
		switch sealed := j.GetSealedEnv(); {
		case len(j.GetEnv()) > 0:
			// This GCS writes env only sealed: env in clear was written
			// by something else (or an older GCS), and env is what every
			// worker of the job starts with (LD_PRELOAD...).
			envErr = fmt.Errorf("%w: the storage holds it in clear, and this GCS takes a job's env only sealed with the cluster token", ErrEnvNotSealed)
		case len(sealed) > 0:
			j.Env, envErr = s.envSealer.open(id, sealed)
		}
		if envErr != nil {
			s.log.Error("GCS storage: a job's forwarded env cannot be opened; the job is kept without it (workers it starts from now on do not get it)",
				"job", id.Short(), "error", envErr)
			r.setAside(tableJobs, key, raw, &StoredRecordError{Table: tableJobs, Key: key, Err: envErr}, true)
			// The job's record without the env: the next restart does not
			// report it again.
			j.Env, j.SealedEnv = nil, nil
			b, err := proto.Marshal(j)
			if err != nil {
				return err
			}
			r.batch = append(r.batch, store.Write{Table: tableJobs, Key: key, Value: b})
		}
		j.SealedEnv = nil
		s.jobs[id] = j
		s.jobOrder = append(s.jobOrder, id)
		return nil
	})
	sortByTime(s.jobOrder, func(id ids.ID) int64 { return s.jobs[id].GetStartTimeMs() })
	return err
}

// restoreActors reads the actor table back: RegisterActor's checks, a
// known state, and a live actor's name held by no other live actor (the
// first registered keeps it, as live).
func (s *Server) restoreActors(ctx context.Context, r *restorer) error {
	type rec struct {
		key string
		raw []byte
		a   *actorEntry
	}
	var recs []rec
	err := load(ctx, r, tableActors, func() *gorayv1.ActorInfo { return &gorayv1.ActorInfo{} }, func(key string, raw []byte, info *gorayv1.ActorInfo) error {
		id, _, err := checkActorInfo(info)
		if err != nil {
			return err
		}
		if err := keyIs(key, id); err != nil {
			return err
		}
		if _, ok := gorayv1.ActorState_name[int32(info.GetState())]; !ok {
			return &InvalidArgumentError{Field: "actor.state", Problem: fmt.Sprintf("unknown state %d", info.GetState())}
		}
		recs = append(recs, rec{key, raw, &actorEntry{id: id, info: info, changed: make(chan struct{})}})
		return nil
	})
	slices.SortStableFunc(recs, func(x, y rec) int { return cmp.Compare(x.a.info.GetStartTimeMs(), y.a.info.GetStartTimeMs()) })
	for _, rc := range recs {
		a, info := rc.a, rc.a.info
		if name := info.GetName(); name != "" && info.GetState() != gorayv1.ActorState_ACTOR_STATE_DEAD {
			if holder, ok := s.byName[a.nameKey()]; ok {
				r.setAside(tableActors, rc.key, rc.raw, &StoredRecordError{Table: tableActors, Key: rc.key,
					Err: &NameTakenError{Name: name, Namespace: info.GetNamespace(), Holder: holder, Class: s.actors[holder].info.GetClassName()}}, false)
				continue
			}
			s.byName[a.nameKey()] = a.id
		}
		s.actors[a.id] = a
		s.actorSeq = append(s.actorSeq, a.id)
	}
	return err
}

// restoreKV reads the key-value store back: KVPut's checks and quotas,
// entries taken in namespace and key order (those past a quota are set
// aside).
func (s *Server) restoreKV(ctx context.Context, r *restorer) error {
	keys, recs, err := r.records(ctx, tableKV)
	if err != nil {
		return err
	}
	type entry struct{ rk, ns, key string }
	var es []entry
	for _, rk := range keys {
		ns, key, ok := strings.Cut(rk, "\x00")
		if !ok {
			r.setAside(tableKV, rk, recs[rk], &StoredRecordError{Table: tableKV, Key: rk, Err: fmt.Errorf("no namespace separator (NUL) in the record's key")}, false)
			continue
		}
		es = append(es, entry{rk, ns, key})
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Or(strings.Compare(a.ns, b.ns), strings.Compare(a.key, b.key)) })
	for _, e := range es {
		v := recs[e.rk]
		err := s.kvLimits.checkEntry(e.ns, e.key, v)
		if err == nil {
			err = s.kvSetLocked(e.ns, e.key, v) // (no lock needed yet: nothing serves)
		}
		if err != nil {
			r.setAside(tableKV, e.rk, v, &StoredRecordError{Table: tableKV, Key: e.rk, Err: err}, false)
		}
	}
	return nil
}

// restoreGroups reads the placement group table back:
// CreatePlacementGroup's checks, a known state, bundles in index order
// naming well-formed nodes, and a live group's name held once. A group
// cut short while PREPARED is placed again.
func (s *Server) restoreGroups(ctx context.Context, r *restorer) error {
	p := s.pgs
	type rec struct {
		key string
		raw []byte
		e   *pgEntry
	}
	var recs []rec
	err := load(ctx, r, tableGroups, func() *gorayv1.PlacementGroupInfo { return &gorayv1.PlacementGroupInfo{} }, func(key string, raw []byte, info *gorayv1.PlacementGroupInfo) error {
		id, _, strategy, bundles, err := checkGroupInfo(info)
		if err != nil {
			return err
		}
		if err := keyIs(key, id); err != nil {
			return err
		}
		if _, ok := gorayv1.PlacementGroupState_name[int32(info.GetState())]; !ok {
			return &InvalidArgumentError{Field: "group.state", Problem: fmt.Sprintf("unknown state %d", info.GetState())}
		}
		for i, b := range info.GetBundles() {
			field := fmt.Sprintf("group.bundles[%d]", i)
			if int(b.GetIndex()) != i {
				return &InvalidArgumentError{Field: field + ".index", Problem: fmt.Sprintf("%d, not its position %d", b.GetIndex(), i)}
			}
			if _, err := parseOptionalID(field+".node_id", b.GetNodeId()); err != nil {
				return err
			}
		}
		e := &pgEntry{id: id, info: info, strategy: strategy, bundles: bundles, changed: make(chan struct{})}
		recs = append(recs, rec{key, raw, e})
		return nil
	})
	// A live group's name is held once: by the first created, as live.
	slices.SortStableFunc(recs, func(x, y rec) int { return cmp.Compare(x.e.info.GetCreateTimeMs(), y.e.info.GetCreateTimeMs()) })
	for _, rc := range recs {
		e, info, id := rc.e, rc.e.info, rc.e.id
		live := info.GetState() != gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED
		if key := groupName(info); key.name != "" && live {
			if holder, ok := p.byName[key]; ok {
				r.setAside(tableGroups, rc.key, rc.raw, &StoredRecordError{Table: tableGroups, Key: rc.key, Err: &NameTakenError{Kind: "placement group", Name: key.name, Namespace: key.namespace, Holder: holder}}, false)
				continue
			}
			p.byName[key] = id
		}
		if info.GetState() == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_PREPARED {
			// Its reservation was cut short: place it again.
			info.State = gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_PENDING
		}
		if live {
			// Its committed bundles (a PENDING group keeps those a node
			// death did not cut) count in their nodes' totals again.
			for i, b := range info.GetBundles() {
				if len(b.GetNodeId()) == 0 {
					continue
				}
				if n := s.nodes[ids.MustFromBytes(b.GetNodeId())]; n != nil {
					if n.groups == nil {
						n.groups = resources.Set{}
					}
					n.groups.Add(resources.BundleResources(e.bundles[i], id.String(), i))
				}
			}
		}
		p.groups[id] = e
		p.order = append(p.order, id)
	}
	sortByTime(p.order, func(id ids.ID) int64 { return p.groups[id].info.GetCreateTimeMs() })
	return err
}

// nodeReachableLocked reports whether the GCS may dial node id (or give
// its addresses to anyone who would): it is alive and has registered with
// this GCS, not only been read back from the storage. s.mu must be held.
func (s *Server) nodeReachableLocked(n *nodeEntry) bool {
	return n != nil && n.info.GetState() == StateAlive && !n.fromStorage
}

// reachableNodes returns the infos of the nodes the GCS may dial
// (nodeReachableLocked), by id.
func (s *Server) reachableNodes() map[ids.ID]*gorayv1.NodeInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[ids.ID]*gorayv1.NodeInfo{}
	for _, id := range s.nodeOrder {
		if n := s.nodes[id]; s.nodeReachableLocked(n) {
			out[id] = cloneMsg(n.info)
		}
	}
	return out
}

// StorageSetAside returns how many records the storage keeps aside in its
// quarantine table (as of this GCS's start).
func (s *Server) StorageSetAside() int64 { return s.setAside }

// nodesReconnecting counts the alive nodes known only from the storage.
func (s *Server) nodesReconnecting() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c int64
	for _, n := range s.nodes {
		if n.fromStorage && n.info.GetState() == StateAlive {
			c++
		}
	}
	return c
}

// stripAddresses clears what a view of a node known only from the
// storage must not carry: every address and path a reader could dial or
// open.
func stripAddresses(info *gorayv1.NodeInfo) {
	info.RayletUnix, info.RayletTcp, info.ObjectAddr, info.MetricsAddr, info.DashboardAddr, info.SessionDir = "", "", "", "", "", ""
}
