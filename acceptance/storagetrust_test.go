package acceptance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/testservers/redistest"
)

// The GCS's storage is a trust boundary (docs/security.md, "The GCS's
// storage"): these tests write into a real Redis what someone with write
// access to it could, restart the head's GCS on it, and check what the
// cluster does with it.

// trustTimeout bounds one of these tests (a head, a GCS restart, a job).
const trustTimeout = 150 * time.Second

// trap stands for the address an injected node record names: a listener
// that counts every connection made to it, served by a gRPC server that
// answers every call Unimplemented and records the call's metadata (where
// a goray client puts the cluster token).
type trap struct {
	addr  string
	mu    sync.Mutex
	conns int
	md    []string // each call's method and metadata
}

// countingListener counts the connections it accepts into its trap.
type countingListener struct {
	net.Listener
	tr *trap
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.tr.mu.Lock()
		l.tr.conns++
		l.tr.mu.Unlock()
	}
	return c, err
}

func listenTrap(t *testing.T, addr string) *trap {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on %s: %v", addr, err)
	}
	tr := &trap{addr: l.Addr().String()}
	g := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(stream.Context())
		method, _ := grpc.MethodFromServerStream(stream)
		rec := method
		for k, vs := range md { // (md's String redacts authorization)
			rec += fmt.Sprintf(" %s=%q", k, vs)
		}
		tr.mu.Lock()
		tr.md = append(tr.md, rec)
		tr.mu.Unlock()
		return status.Error(codes.Unimplemented, "trap")
	}))
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(countingListener{l, tr}) }()
	t.Cleanup(func() { g.Stop(); <-served })
	return tr
}

// seen returns how many connections were made and the calls' metadata.
func (tr *trap) seen() (int, []string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.conns, append([]string(nil), tr.md...)
}

// trustCluster is a head keeping its GCS's tables in a real Redis, and a
// client of that Redis.
type trustCluster struct {
	h      *head
	rdb    *redis.Client
	prefix string
}

func startTrustCluster(t *testing.T, ctx context.Context) *trustCluster {
	t.Helper()
	rs := redistest.Start(t)
	cfg := writeConfig(t, shortTempDir(t), gcsHealth+redisGCS(rs.Address, ""))
	h := startHeadEnv(t, ctx, []string{"GORAY_GCS_REDIS_PASSWORD=" + rs.Password}, "--config", cfg, "--num-cpus", "2", "--node-name", "head")
	dumpHeadLogs(t, h)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Address, Password: rs.Password})
	t.Cleanup(func() { rdb.Close() })
	return &trustCluster{h: h, rdb: rdb, prefix: "ft"}
}

// restartGCS kills the head's GCS with SIGKILL and waits for the head to
// have restarted it on the same storage, serving, and for the head's node
// to have registered again (until then the restored GCS lists it nowhere).
func (c *trustCluster) restartGCS(t *testing.T, ctx context.Context) {
	t.Helper()
	old := c.h.gcsInfo(t).GCSPid
	self := readNodeJSON(t, c.h.session).NodeID
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the GCS restarted and restored from Redis", func() bool {
		i := c.h.gcsInfo(t)
		if i.GCSPid == old || i.GCSPid == 0 || !alive(i.GCSPid) {
			return false
		}
		gs, r := c.h.gcsStatus(ctx)
		if r.code != 0 || !gs.GCS.Restored || gs.GCS.Pid != i.GCSPid || !gs.GCS.Healthy {
			return false
		}
		s, r := c.h.status(ctx)
		return r.code == 0 && slices.Contains(aliveIDs(s), self)
	})
}

// runQuickstart runs a job on the cluster; it must pass.
func (c *trustCluster) runQuickstart(t *testing.T, ctx context.Context) {
	t.Helper()
	j := startJob(t, jobOptions{addr: c.h.addr}, quickstartBin)
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("a job on the cluster exited %d:\n%s", code, out)
	}
}

// TestInjectedNodeRecordGetsNothing: a well-formed alive node record
// written into Redis by someone else, naming an address the test listens
// on for every address field, gets nothing after a GCS restart: no
// connection at all reaches that address (before the fix the restored
// GCS swept it at once, over gRPC with the cluster token in the call's
// metadata), until the GCS declares it dead for never registering
// again; meanwhile a job runs on the real cluster.
func TestInjectedNodeRecordGetsNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), trustTimeout)
	defer cancel()
	c := startTrustCluster(t, ctx)
	trap := listenTrap(t, "127.0.0.77:0")
	addr := trap.addr

	id := ids.New()
	rec, err := proto.Marshal(&pb.NodeInfo{
		NodeId: id.Bytes(), NodeName: "injected", State: "ALIVE", StartTimeMs: time.Now().UnixMilli(),
		RayletTcp: addr, ObjectAddr: addr, MetricsAddr: addr, DashboardAddr: addr, Hostname: "evil",
		Total: &pb.Resources{Amounts: map[string]int64{"CPU": 64 * 10000}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.rdb.HSet(ctx, c.prefix+":nodes", id.String(), rec).Err(); err != nil {
		t.Fatalf("writing the node record into Redis: %v", err)
	}
	c.restartGCS(t, ctx)
	c.runQuickstart(t, ctx)

	// The health check's verdict: the record's node never registered.
	waitFor(t, 60*time.Second, "the injected node declared dead", func() bool {
		s, r := c.h.status(ctx)
		if r.code != 0 {
			return false
		}
		for _, n := range s.Nodes {
			if n.NodeID == id.String() {
				return n.State == "DEAD"
			}
		}
		return false
	})
	if conns, calls := trap.seen(); conns > 0 {
		token, _ := os.ReadFile(tokenPath)
		withToken := 0
		for _, c := range calls {
			if tok := strings.TrimSpace(string(token)); tok != "" && strings.Contains(c, tok) {
				withToken++
			}
		}
		methods := make([]string, len(calls))
		for i, c := range calls {
			methods[i], _, _ = strings.Cut(c, " ")
		}
		t.Fatalf("%d connections reached the address of a node known only from Redis: %d gRPC calls (%v), %d carrying the cluster token", conns, len(calls), methods, withToken)
	}
	// It shows dead, without the addresses the record named.
	st := runGoray(t, ctx, "status", "--json", "--temp-dir", c.h.tempDir)
	if strings.Contains(st.stdout, addr) {
		t.Fatalf("goray status shows the injected record's address %s:\n%s", addr, st.stdout)
	}
}

// TestCorruptRecordSetAside: six random bytes written into Redis as a
// node record do not keep the GCS from starting again (before the fix it
// never did, and the nodes exited 60 s later): the restarted GCS sets the
// record aside in the quarantine table, says so in `goray status`, and
// the cluster runs a job.
func TestCorruptRecordSetAside(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), trustTimeout)
	defer cancel()
	c := startTrustCluster(t, ctx)
	junk := make([]byte, 6)
	rand.Read(junk)
	junk[0] = 0xff // (never a valid field tag: the record cannot be decoded)
	key := ids.New().String()
	if err := c.rdb.HSet(ctx, c.prefix+":nodes", key, junk).Err(); err != nil {
		t.Fatalf("writing the record into Redis: %v", err)
	}
	c.restartGCS(t, ctx)
	c.runQuickstart(t, ctx)

	var gs struct {
		GCS struct {
			StorageSetAside int64 `json:"storage_set_aside"`
		} `json:"gcs"`
	}
	st := runGoray(t, ctx, "status", "--json", "--temp-dir", c.h.tempDir)
	if err := json.Unmarshal([]byte(st.stdout), &gs); err != nil || gs.GCS.StorageSetAside != 1 {
		t.Fatalf("goray status --json: %d records set aside (%v), want 1\n%s", gs.GCS.StorageSetAside, err, st)
	}
	text := runGoray(t, ctx, "status", "--temp-dir", c.h.tempDir)
	if !strings.Contains(text.stdout, "storage: 1 record set aside") {
		t.Fatalf("goray status does not report the record set aside:\n%s", text)
	}
	// Kept aside in Redis, with why, and gone from the node table.
	q, err := c.rdb.HGet(ctx, c.prefix+":quarantine", "nodes/"+key).Bytes()
	if err != nil {
		t.Fatalf("the quarantine table has no nodes/%s: %v", key, err)
	}
	var rec struct {
		Table, Key, Reason string
		Value              []byte
	}
	if err := json.Unmarshal(q, &rec); err != nil || rec.Table != "nodes" || rec.Key != key || !bytes.Equal(rec.Value, junk) || !strings.Contains(rec.Reason, "decoded") {
		t.Fatalf("quarantine record %s (%v); want the record's bytes and why", q, err)
	}
	if err := c.rdb.HGet(ctx, c.prefix+":nodes", key).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("the corrupt record is still in the node table (%v)", err)
	}
	if !strings.Contains(readFile(t, c.h.gcsInfo(t).GCSLogFile), "set aside") {
		t.Error("the GCS's log does not say it set a record aside")
	}
}
