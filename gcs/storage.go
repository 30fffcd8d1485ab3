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
	// cluster (new id, empty tables) whatever is stored (--fresh).
	Fresh bool `json:"fresh,omitempty"`
	// Resume resumes the stored cluster even when it ended cleanly
	// (--resume), and fails with a NothingToResumeError when none is
	// stored. Without Fresh or Resume, a GCS resumes a stored cluster that
	// did not end cleanly and starts a new one otherwise (lifecycle.go).
	Resume bool `json:"resume,omitempty"`
	// Cluster is the name of the cluster the GCS serves (a cluster file's
	// cluster_name; "" is DefaultClusterName). A storage keeps one
	// cluster, and a GCS never resumes one of another name.
	Cluster string `json:"cluster,omitempty"`
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
	if st == nil {
		if opts.Storage.Resume {
			return nil, &NothingToResumeError{Storage: opts.Storage.String()}
		}
		s := New(opts)
		s.clusterName = opts.Storage.clusterName()
		return s, nil
	}
	return openOn(ctx, opts, st)
}

// openOn is Open on an opened store, which the server owns from now on
// (closed on failure too).
func openOn(ctx context.Context, opts Options, st store.Store) (*Server, error) {
	s := New(opts)
	var err error
	if s.envSealer, err = newEnvSealer(opts.Token); err != nil {
		st.Close()
		return nil, err
	}
	s.storage = st
	s.clusterName = opts.Storage.clusterName()
	meta, err := st.GetAll(ctx, tableMeta)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("GCS storage %s: reading the stored cluster's id: %w", st.Describe(), err)
	}
	// A new cluster, or the stored one resumed (lifecycle.go).
	wipeIt, old, err := planStart(opts.Storage, st.Describe(), meta)
	if err != nil {
		st.Close()
		return nil, err
	}
	if wipeIt {
		if err := wipe(ctx, st); err != nil {
			st.Close()
			return nil, fmt.Errorf("GCS storage %s: discarding the stored cluster (new cluster): %w", st.Describe(), err)
		}
		if old.id != "" {
			s.discarded = old.id
			why := "it ended cleanly"
			if opts.Storage.Fresh {
				why = "fresh start"
			}
			s.log.Info("GCS storage: discarded the stored cluster for a new one", "storage", st.Describe(),
				"discarded", old.id, "discarded_name", old.name, "why", why)
		}
	}
	if err := s.restore(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("GCS storage %s: reading back the cluster's state: %w", st.Describe(), err)
	}
	// The storage is this running cluster's, durably, before the GCS
	// serves: a crash from now on resumes it.
	if err := st.Apply(ctx, claimMeta(s.clusterID, s.clusterName, !s.restored)); err != nil {
		st.Close()
		return nil, fmt.Errorf("GCS storage %s: recording the cluster's id and name: %w", st.Describe(), err)
	}
	s.journal = newJournal(st, s.log)
	if s.restored {
		s.log.Info("GCS state restored", "storage", st.Describe(), "cluster", s.clusterID, "name", s.clusterName,
			"nodes", len(s.nodes), "jobs", len(s.jobs), "actors", len(s.actors), "placement_groups", len(s.pgs.groups))
	}
	return s, nil
}

// healthTimeout bounds the storage health check of GetClusterInfo, so a
// storage that hangs shows as unhealthy instead of hanging `goray status`.
const healthTimeout = 2 * time.Second

// tables are every table the GCS keeps.
var tables = []string{tableMeta, tableNodes, tableJobs, tableActors, tableKV, tableGroups, tableQuarantine}

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
// whether it answers, when the GCS started, whether it restored an
// earlier GCS's state, how many records of the storage are set aside
// (restore.go) and how many restored nodes have not registered again.
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

		StorageSetAside:   s.setAside,
		NodesReconnecting: s.nodesReconnecting(),
		History:           s.History(), // (history.go)
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

// ClusterName returns the name of the cluster the server serves
// (Storage.Cluster, else DefaultClusterName).
func (s *Server) ClusterName() string { return s.clusterName }

// Discarded returns the id of the cluster whose stored state Open
// discarded to start this one ("" when it discarded none): the stored
// cluster had ended cleanly, or Storage.Fresh said to.
func (s *Server) Discarded() string { return s.discarded }

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
