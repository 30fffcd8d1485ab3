package gcs

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/gcs/internal/store"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// Storage backends (Storage.Backend).
const (
	// BackendMemory keeps nothing across restarts (the default).
	BackendMemory = "memory"
	// BackendBolt keeps the tables in one bbolt file (Storage.Path).
	BackendBolt = "bolt"
	// BackendRedis keeps them in a Redis server (Storage.Redis*).
	BackendRedis = "redis"
)

// Storage says where the GCS keeps its tables. A write is durable before
// the GCS acknowledges it.
//
// Its JSON form (how a head hands it to its GCS process) leaves the
// password out.
type Storage struct {
	// Backend is BackendMemory (""), BackendBolt or BackendRedis.
	Backend string `json:"backend"`
	// Path is the bbolt file (BackendBolt).
	Path string `json:"path,omitempty"`
	// RedisAddress (host:port), RedisUsername and RedisPassword reach the
	// Redis server; RedisDB is its database number and RedisPrefix
	// namespaces the keys (default "goray").
	RedisAddress  string `json:"redis_address,omitempty"`
	RedisUsername string `json:"redis_username,omitempty"`
	RedisPassword string `json:"-"`
	RedisDB       int    `json:"redis_db,omitempty"`
	RedisPrefix   string `json:"redis_prefix,omitempty"`
	// RedisTLS, when not nil, reaches the Redis server over TLS.
	RedisTLS *RedisTLS `json:"redis_tls,omitempty"`
	// Fresh discards what the storage holds before the GCS starts: a new
	// cluster (new id, empty tables) instead of resuming the stored one.
	Fresh bool `json:"fresh,omitempty"`
}

// RedisTLS says how the GCS reaches its Redis server over TLS (1.2 or
// later): PEM files by path (the key is read by the GCS process itself,
// and must be readable by its owner only) and the name the server's
// certificate must be for.
type RedisTLS struct {
	// CAFile is the CA certificate that signed the server's; "" trusts
	// the system's roots.
	CAFile string `json:"ca_file,omitempty"`
	// CertFile and KeyFile are the client certificate and its key, for a
	// server that requires one (both or neither).
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
	// ServerName is the name the server's certificate must be for; ""
	// means the host of RedisAddress.
	ServerName string `json:"server_name,omitempty"`
}

// String describes the storage without its password.
func (st Storage) String() string {
	switch st.Backend {
	case BackendBolt:
		return "bolt " + st.Path
	case BackendRedis:
		if st.RedisTLS != nil {
			return "redis " + st.RedisAddress + " (TLS)"
		}
		return "redis " + st.RedisAddress
	default:
		return "memory (not durable)"
	}
}

// openStore opens the backend st names; errors name the path or address.
func openStore(ctx context.Context, st Storage) (store.Store, error) {
	switch st.Backend {
	case "", BackendMemory:
		return nil, nil
	case BackendBolt:
		if st.Path == "" {
			return nil, fmt.Errorf("GCS storage: bolt needs a path")
		}
		return store.OpenBolt(st.Path)
	case BackendRedis:
		ro := store.RedisOptions{Address: st.RedisAddress, Username: st.RedisUsername, Password: st.RedisPassword, DB: st.RedisDB, Prefix: st.RedisPrefix}
		if t := st.RedisTLS; t != nil {
			ro.TLS = &store.RedisTLS{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName}
		}
		return store.OpenRedis(ctx, ro)
	default:
		return nil, fmt.Errorf("GCS storage: unknown backend %q (want %s, %s or %s)", st.Backend, BackendMemory, BackendBolt, BackendRedis)
	}
}

// Open returns a server whose tables live in opts.Storage: it opens the
// backend (within ctx), reads back what an earlier GCS of the cluster
// stored there, and from then on writes every change through before
// acknowledging it. The cluster's id is created on first use and kept.
// Close releases the storage.
func Open(ctx context.Context, opts Options) (*Server, error) {
	st, err := openStore(ctx, opts.Storage)
	if err != nil {
		return nil, err
	}
	s := New(opts)
	if st == nil {
		return s, nil
	}
	s.storage = st
	if opts.Storage.Fresh {
		if err := wipe(ctx, st); err != nil {
			st.Close()
			return nil, fmt.Errorf("GCS storage %s: discarding the stored cluster (fresh start): %w", st.Describe(), err)
		}
		s.log.Info("GCS storage wiped for a fresh cluster", "storage", st.Describe())
	}
	if err := s.restore(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("GCS storage %s: reading back the cluster's state: %w", st.Describe(), err)
	}
	s.journal = newJournal(st, s.log)
	if s.restored {
		s.log.Info("GCS state restored", "storage", st.Describe(), "cluster", s.clusterID,
			"nodes", len(s.nodes), "jobs", len(s.jobs), "actors", len(s.actors), "placement_groups", len(s.pgs.groups))
	} else {
		s.journal.putRaw(tableMeta, "cluster_id", []byte(s.clusterID))
		if err := s.journal.wait(ctx, s.durableNow().seq); err != nil {
			s.Close(ctx)
			return nil, err
		}
	}
	return s, nil
}

// healthTimeout bounds the storage health check of GetClusterInfo, so a
// storage that hangs shows as unhealthy instead of hanging `goray status`.
const healthTimeout = 2 * time.Second

// tables are every table the GCS keeps.
var tables = []string{tableMeta, tableNodes, tableJobs, tableActors, tableKV, tableGroups}

// wipe deletes every record of every table, in one atomic batch.
func wipe(ctx context.Context, st store.Store) error {
	var batch []store.Write
	for _, t := range tables {
		recs, err := st.GetAll(ctx, t)
		if err != nil {
			return err
		}
		for k := range recs {
			batch = append(batch, store.Write{Table: t, Key: k, Delete: true})
		}
	}
	if len(batch) == 0 {
		return nil
	}
	return st.Apply(ctx, batch)
}

// GetClusterInfo describes this GCS: the cluster id, the storage and
// whether it answers, when the GCS started and whether it restored an
// earlier GCS's state.
func (s *Server) GetClusterInfo(ctx context.Context, _ *gorayv1.GetClusterInfoRequest) (*gorayv1.GetClusterInfoReply, error) {
	hctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	backend, health, started := s.StorageStatus(hctx)
	r := &gorayv1.GetClusterInfoReply{
		ClusterId:   s.clusterID,
		Storage:     backend,
		StartedAtMs: started.UnixMilli(),
		NowMs:       s.nowMs(),
		Restored:    s.restored,
		Pid:         int64(os.Getpid()),
	}
	if health != nil {
		r.StorageError = health.Error()
	}
	return r, nil
}

// ClusterID returns the cluster's id: kept in the storage, so a restarted
// GCS has the same one.
func (s *Server) ClusterID() string { return s.clusterID }

// Restored reports whether the server read back an earlier GCS's state.
func (s *Server) Restored() bool { return s.restored }

// StorageStatus describes the storage: the backend and where it keeps
// data, whether it answers now, and when this GCS started (for `goray
// status`).
func (s *Server) StorageStatus(ctx context.Context) (backend string, health error, started time.Time) {
	if s.storage == nil {
		return "memory (not durable)", nil, s.started
	}
	return s.storage.Describe(), s.storage.Health(ctx), s.started
}

// Close writes what is queued (within ctx) and closes the storage. A
// server without storage has nothing to close.
func (s *Server) Close(ctx context.Context) error {
	var err error
	if s.journal != nil {
		err = s.journal.close(ctx)
	}
	if s.storage != nil {
		if cerr := s.storage.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// saveLocked queues a record for the storage; the caller holds the lock
// that orders changes of the table (s.mu, s.kvMu or the placement
// groups' lock). Without storage it does nothing.
func (s *Server) saveLocked(table, key string, m proto.Message) {
	if s.journal != nil {
		s.journal.put(table, key, m)
	}
}

func (s *Server) saveActorLocked(a *actorEntry) { s.saveLocked(tableActors, a.id.String(), a.info) }

// durableNow is what a handler waits for: every change queued so far.
func (s *Server) durableNow() durable {
	if s.journal == nil {
		return durable{}
	}
	s.journal.mu.Lock()
	defer s.journal.mu.Unlock()
	return durable{j: s.journal, seq: s.journal.seq}
}

// kvRecordKey is a KV entry's key in the kv table: namespace and key
// joined by a NUL, which neither may contain.
func kvRecordKey(ns, key string) string { return ns + "\x00" + key }

// restore reads every table back into the server.
func (s *Server) restore(ctx context.Context) error {
	meta, err := s.storage.GetAll(ctx, tableMeta)
	if err != nil {
		return err
	}
	if id, ok := meta["cluster_id"]; ok {
		s.clusterID = string(id)
		s.restored = true
	}
	now := s.now()
	if err := loadTable(ctx, s.storage, tableNodes, func() *gorayv1.NodeInfo { return &gorayv1.NodeInfo{} }, func(key string, info *gorayv1.NodeInfo) error {
		id, err := ids.FromBytes(info.GetNodeId())
		if err != nil {
			return err
		}
		// An alive node has the health timeout from now to come back.
		n := &nodeEntry{info: info, lastHeartbeat: now}
		if info.GetTotal() != nil {
			n.available = cloneMsg(info.GetTotal())
		}
		s.nodes[id] = n
		s.nodeOrder = append(s.nodeOrder, id)
		return nil
	}); err != nil {
		return err
	}
	sortByTime(s.nodeOrder, func(id ids.ID) int64 { return s.nodes[id].info.GetStartTimeMs() })
	if err := loadTable(ctx, s.storage, tableJobs, func() *gorayv1.JobInfo { return &gorayv1.JobInfo{} }, func(key string, j *gorayv1.JobInfo) error {
		id, err := ids.FromBytes(j.GetJobId())
		if err != nil {
			return err
		}
		s.jobs[id] = j
		s.jobOrder = append(s.jobOrder, id)
		return nil
	}); err != nil {
		return err
	}
	sortByTime(s.jobOrder, func(id ids.ID) int64 { return s.jobs[id].GetStartTimeMs() })
	if err := loadTable(ctx, s.storage, tableActors, func() *gorayv1.ActorInfo { return &gorayv1.ActorInfo{} }, func(key string, info *gorayv1.ActorInfo) error {
		id, err := ids.FromBytes(info.GetActorId())
		if err != nil {
			return err
		}
		a := &actorEntry{id: id, info: info, changed: make(chan struct{})}
		s.actors[id] = a
		s.actorSeq = append(s.actorSeq, id)
		if name := info.GetName(); name != "" && info.GetState() != gorayv1.ActorState_ACTOR_STATE_DEAD {
			s.byName[a.nameKey()] = id
		}
		return nil
	}); err != nil {
		return err
	}
	sortByTime(s.actorSeq, func(id ids.ID) int64 { return s.actors[id].info.GetStartTimeMs() })
	kv, err := s.storage.GetAll(ctx, tableKV)
	if err != nil {
		return err
	}
	for rk, v := range kv {
		ns, key, ok := strings.Cut(rk, "\x00")
		if !ok {
			return fmt.Errorf("kv record %q has no namespace separator", rk)
		}
		m := s.kv[ns]
		use := s.kvUse[ns]
		if m == nil {
			m = map[string][]byte{}
			s.kv[ns] = m
			use = &kvUsage{}
			s.kvUse[ns] = use
			use.bytes += kvNamespaceCost(ns)
			s.kvTotal += kvNamespaceCost(ns)
		}
		m[key] = v
		c := kvCost(key, v)
		use.bytes += c
		use.keys++
		s.kvTotal += c
	}
	p := s.pgs
	defer func() {
		sortByTime(p.order, func(id ids.ID) int64 { return p.groups[id].info.GetCreateTimeMs() })
		p.pruneLocked() // (no journal yet: the storage forgets them at a later prune)
	}()
	return loadTable(ctx, s.storage, tableGroups, func() *gorayv1.PlacementGroupInfo { return &gorayv1.PlacementGroupInfo{} }, func(key string, info *gorayv1.PlacementGroupInfo) error {
		id, err := ids.FromBytes(info.GetPlacementGroupId())
		if err != nil {
			return err
		}
		strategy, ok := strategies[info.GetStrategy()]
		if !ok {
			return fmt.Errorf("placement group %s: unknown strategy %v", id, info.GetStrategy())
		}
		e := &pgEntry{id: id, info: info, strategy: strategy, changed: make(chan struct{})}
		for _, b := range info.GetBundles() {
			e.bundles = append(e.bundles, resources.Set(b.GetResources().GetAmounts()).Clone())
		}
		if info.GetState() == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_PREPARED {
			// Its reservation was cut short: place it again.
			info.State = gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_PENDING
		}
		if info.GetState() != gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED {
			// Its committed bundles (a PENDING group keeps those a node
			// death did not cut) count in their nodes' totals again.
			for i, b := range info.GetBundles() {
				if nid, err := ids.FromBytes(b.GetNodeId()); err == nil && len(b.GetNodeId()) > 0 {
					if n := s.nodes[nid]; n != nil {
						if n.groups == nil {
							n.groups = resources.Set{}
						}
						n.groups.Add(resources.BundleResources(e.bundles[i], id.String(), i))
					}
				}
			}
		}
		p.groups[id] = e
		p.order = append(p.order, id)
		if info.GetState() == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED {
			p.removed++
		}
		if name := info.GetName(); name != "" && info.GetState() != gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED {
			p.byName[name] = id
		}
		return nil
	})
}

// loadTable decodes every record of table with decode.
func loadTable[M proto.Message](ctx context.Context, st store.Store, table string, newMsg func() M, add func(key string, m M) error) error {
	recs, err := st.GetAll(ctx, table)
	if err != nil {
		return err
	}
	for k, v := range recs {
		m := newMsg()
		if err := proto.Unmarshal(v, m); err != nil {
			return fmt.Errorf("%s record %q: %w", table, k, err)
		}
		if err := add(k, m); err != nil {
			return fmt.Errorf("%s record %q: %w", table, k, err)
		}
	}
	return nil
}

// sortByTime orders restored ids by when they started, as they were
// registered (the storage keeps no order).
func sortByTime(xs []ids.ID, at func(ids.ID) int64) {
	slices.SortStableFunc(xs, func(a, b ids.ID) int {
		ta, tb := at(a), at(b)
		switch {
		case ta < tb:
			return -1
		case ta > tb:
			return 1
		}
		return strings.Compare(a.String(), b.String())
	})
}
