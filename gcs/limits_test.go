package gcs

import (
	"context"
	"errors"
	"github.com/goray-dev/goray/internal/leaktest"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/limits"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// startServerMaxMsg is startServer with the message limits goray's nodes
// use (256 MiB), so that large requests reach the handlers.
func startServerMaxMsg(t *testing.T, opts Options) (*Server, gorayv1.GcsClient) {
	t.Helper()
	leaktest.Goroutines(t)
	s := New(opts)
	sock := filepath.Join(t.TempDir(), "gcs.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.MaxRecvMsgSize(limits.MaxMessageSize), grpc.MaxSendMsgSize(limits.MaxMessageSize))
	s.Register(g)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(lis)
	}()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limits.MaxMessageSize), grpc.MaxCallSendMsgSize(limits.MaxMessageSize)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		<-served
	})
	return s, gorayv1.NewGcsClient(conn)
}

// heapAfterGC returns the live heap once garbage is collected.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Four 200 MiB puts once took the head from 27 MiB to 1.9 GiB; now each is
// refused by the value limit and the store keeps nothing. The first goes
// over gRPC with the nodes' 256 MiB message limit, the others in-process
// (moving 200 MiB through gRPC is slow under the race detector).
func TestKVHugePutsRefused(t *testing.T) {
	s, c := startServerMaxMsg(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	before := heapAfterGC()
	value := make([]byte, 200<<20)
	for i := range 4 {
		req := &gorayv1.KVPutRequest{Ns: "attack", Key: "k" + string(rune('0'+i)), Value: value, Overwrite: true}
		var err error
		if i == 0 {
			_, err = c.KVPut(ctx, req)
		} else {
			_, err = s.KVPut(ctx, req)
		}
		wantCode(t, err, codes.InvalidArgument, `the value of key "k`)
		for _, w := range []string{`in namespace "attack"`, "is 209715200 bytes", "the limit is 8388608 bytes"} {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("error %q does not say %q", err, w)
			}
		}
	}
	value = nil
	if grew := int64(heapAfterGC()) - int64(before); grew > 32<<20 {
		t.Fatalf("the heap grew by %d MiB after refused puts", grew>>20)
	}
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	if s.kvTotal != 0 || len(s.kv) != 0 {
		t.Fatalf("the store holds %d bytes in %d namespaces after refused puts", s.kvTotal, len(s.kv))
	}
}

func TestKVLimits(t *testing.T) {
	_, c := startServer(t, Options{KV: KVLimits{MaxNamespaceLen: 8, MaxKeyLen: 10, MaxValueSize: 100}})
	ctx := ctxT(t)
	long := strings.Repeat("x", 11)
	tests := []struct {
		name string
		call func() error
		want []string
	}{
		{"namespace too long", func() error {
			_, err := c.KVPut(ctx, &gorayv1.KVPutRequest{Ns: "namespace", Key: "k", Value: []byte("v")})
			return err
		}, []string{"invalid ns", `namespace "namespace" is 9 bytes long; the limit is 8 bytes`}},
		{"key too long", func() error {
			_, err := c.KVPut(ctx, &gorayv1.KVPutRequest{Ns: "ns", Key: long, Value: []byte("v")})
			return err
		}, []string{"invalid key", `key "xxxxxxxxxxx" in namespace "ns" is 11 bytes long; the limit is 10 bytes`}},
		{"value too large", func() error {
			_, err := c.KVPut(ctx, &gorayv1.KVPutRequest{Ns: "ns", Key: "k", Value: make([]byte, 101)})
			return err
		}, []string{"invalid value", `the value of key "k" in namespace "ns" is 101 bytes; the limit is 100 bytes`}},
		{"get with a key too long", func() error {
			_, err := c.KVGet(ctx, &gorayv1.KVGetRequest{Ns: "ns", Key: long})
			return err
		}, []string{"invalid key", "is 11 bytes long"}},
		{"delete in a namespace too long", func() error {
			_, err := c.KVDel(ctx, &gorayv1.KVDelRequest{Ns: "namespace", Key: "k"})
			return err
		}, []string{"invalid ns"}},
		{"namespace with a NUL byte", func() error {
			_, err := c.KVPut(ctx, &gorayv1.KVPutRequest{Ns: "a\x00b", Key: "k", Value: []byte("v")})
			return err
		}, []string{"invalid ns", "contains a NUL byte"}},
		{"keys with a prefix too long", func() error {
			_, err := c.KVKeys(ctx, &gorayv1.KVKeysRequest{Ns: "ns", Prefix: long})
			return err
		}, []string{"invalid prefix", `prefix "xxxxxxxxxxx" in namespace "ns"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			wantCode(t, err, codes.InvalidArgument, tt.want[0])
			for _, w := range tt.want[1:] {
				if !strings.Contains(status.Convert(err).Message(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// At the limits everything is accepted.
	_, err := c.KVPut(ctx, &gorayv1.KVPutRequest{Ns: "12345678", Key: long[:10], Value: make([]byte, 100)})
	mustOK(t, err)
}

func TestKVQuotas(t *testing.T) {
	// A namespace costs len(ns) + 512 while it holds keys, each entry
	// len(key) + len(value) + 64.
	s, c := startServer(t, Options{KV: KVLimits{NamespaceBytes: 1000, NamespaceKeys: 3, TotalBytes: 1700}})
	ctx := ctxT(t)
	put := func(ns, key string, n int) error {
		_, err := c.KVPut(ctx, &gorayv1.KVPutRequest{Ns: ns, Key: key, Value: make([]byte, n), Overwrite: true})
		return err
	}
	mustOK(t, put("a", "k1", 100)) // 513 + 166 = 679
	mustOK(t, put("a", "k2", 100)) // 845
	err := put("a", "k3", 100)     // 1011 > 1000
	wantCode(t, err, codes.ResourceExhausted, `kv put of key "k3" in namespace "a" refused: the namespace would hold 1011 bytes, more than its quota of 1000 (it holds 845)`)
	var qe *QuotaExceededError
	if _, err := s.KVPut(ctx, &gorayv1.KVPutRequest{Ns: "a", Key: "k3", Value: make([]byte, 100)}); !errors.As(err, &qe) || qe.Unit != "bytes" || qe.Store {
		t.Fatalf("in-process error = %v, want a namespace QuotaExceededError", err)
	}
	// Overwriting with a smaller value frees room; a third key fits then.
	mustOK(t, put("a", "k2", 10)) // 755
	mustOK(t, put("a", "k3", 10)) // 831
	err = put("a", "k4", 0)       // a fourth key
	wantCode(t, err, codes.ResourceExhausted, "the namespace would hold 4 keys, more than its quota of 3")
	// The store's quota covers all namespaces.
	mustOK(t, put("b", "k1", 200)) // total 831 + 779 = 1610
	err = put("c", "k1", 0)        // 1610 + 579 > 1700
	wantCode(t, err, codes.ResourceExhausted, "the key-value store (all namespaces) would hold 2189 bytes, more than its quota of 1700")
	// Deleting (one key, or by prefix) gives the room back, and an
	// emptied namespace its own cost.
	_, err = c.KVDel(ctx, &gorayv1.KVDelRequest{Ns: "b", Key: "k1"})
	mustOK(t, err)
	mustOK(t, put("c", "k1", 0)) // 831 + 579 = 1410
	_, err = c.KVDel(ctx, &gorayv1.KVDelRequest{Ns: "a", Key: "k", ByPrefix: true})
	mustOK(t, err)
	mustOK(t, put("a", "big", 300)) // 579 + 513 + 367 = 1459
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	if s.kvTotal != 1459 || s.kvUse["a"].keys != 1 || s.kvUse["a"].bytes != 880 || s.kvUse["b"] != nil {
		t.Fatalf("accounting: total %d, a %+v, b %+v", s.kvTotal, s.kvUse["a"], s.kvUse["b"])
	}
}

// A fake node announcing 10^6 CPUs once registered and showed ALIVE; it
// and other nonsense are now refused with InvalidArgument naming the field,
// and the node does not appear.
func TestRegisterNodeValidation(t *testing.T) {
	_, c := startServer(t, Options{})
	ctx := ctxT(t)
	long := strings.Repeat("n", 300)
	tests := []struct {
		name   string
		change func(*gorayv1.NodeInfo)
		want   []string
	}{
		{"a million CPUs", func(n *gorayv1.NodeInfo) { n.Total.Amounts["CPU"] = 1e6 * resources.Unit },
			[]string{"invalid node.total", `resource "CPU": amount 1000000 is outside 0 to 65536`}},
		{"negative amount", func(n *gorayv1.NodeInfo) { n.Total.Amounts["accel"] = -1 },
			[]string{"invalid node.total", `resource "accel"`, "outside 0 to"}},
		{"amount that overflows when added up", func(n *gorayv1.NodeInfo) { n.Total.Amounts["memory"] = 1 << 62 },
			[]string{"invalid node.total", `resource "memory"`}},
		{"empty resource name", func(n *gorayv1.NodeInfo) { n.Total.Amounts[""] = 1 },
			[]string{"invalid node.total", "resource name is empty"}},
		{"resource name too long", func(n *gorayv1.NodeInfo) { n.Total.Amounts[long] = 1 },
			[]string{"invalid node.total", "300 bytes long, more than 256"}},
		{"too many resources", func(n *gorayv1.NodeInfo) {
			for i := range resources.MaxResources {
				n.Total.Amounts["r"+strings.Repeat("x", i)] = 1
			}
		}, []string{"invalid node.total", "257 resources; at most 256"}},
		{"label key too long", func(n *gorayv1.NodeInfo) { n.Labels[long] = "v" },
			[]string{"invalid node.labels", "300 bytes long"}},
		{"label value too long", func(n *gorayv1.NodeInfo) { n.Labels["zone"] = strings.Repeat("v", 1025) },
			[]string{"invalid node.labels", `label "zone" is 1025 bytes long`}},
		{"too many labels", func(n *gorayv1.NodeInfo) {
			for i := range limits.MaxLabels {
				n.Labels["l"+strings.Repeat("x", i)] = ""
			}
		}, []string{"invalid node.labels", "257 labels"}},
		{"raylet address without port", func(n *gorayv1.NodeInfo) { n.RayletTcp = "10.0.0.1" },
			[]string{"invalid node.raylet_tcp", `"10.0.0.1" is not a host:port address`}},
		{"raylet port 0", func(n *gorayv1.NodeInfo) { n.RayletTcp = "10.0.0.1:0" },
			[]string{"invalid node.raylet_tcp", `the port "0" is not a number from 1 to 65535`}},
		{"data plane without host", func(n *gorayv1.NodeInfo) { n.ObjectAddr = ":7000" },
			[]string{"invalid node.object_addr", "names no host"}},
		{"metrics address without port", func(n *gorayv1.NodeInfo) { n.MetricsAddr = "127.0.0.2" },
			[]string{"invalid node.metrics_addr", `"127.0.0.2" is not a host:port address`}},
		{"node name too long", func(n *gorayv1.NodeInfo) { n.NodeName = long },
			[]string{"invalid node.node_name", "300 bytes long"}},
		{"negative pid", func(n *gorayv1.NodeInfo) { n.Pid = -5 },
			[]string{"invalid node.pid", "-5 is negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := newID()
			info := nodeInfo(id, "fake")
			info.RayletTcp, info.ObjectAddr = "10.0.0.9:7001", "[::1]:7002"
			tt.change(info)
			_, err := c.RegisterNode(ctx, &gorayv1.RegisterNodeRequest{Node: info})
			wantCode(t, err, codes.InvalidArgument, tt.want[0])
			for _, w := range tt.want[1:] {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
			all, err := c.GetAllNodes(ctx, &gorayv1.GetAllNodesRequest{})
			mustOK(t, err)
			if len(all.GetNodes()) != 0 {
				t.Fatalf("a refused node is in the table: %v", all.GetNodes())
			}
		})
	}
	// The largest valid node registers.
	info := nodeInfo(newID(), "big")
	info.Total.Amounts["CPU"] = resources.MaxCount * resources.Unit
	info.Total.Amounts["memory"] = resources.MaxFixed
	info.RayletTcp, info.ObjectAddr = "10.0.0.9:65535", "host.example:1"
	_, err := c.RegisterNode(ctx, &gorayv1.RegisterNodeRequest{Node: info})
	mustOK(t, err)
}

func TestHeartbeatValidation(t *testing.T) {
	clock := newFakeClock()
	_, c := startServer(t, Options{Now: clock.Now})
	ctx := ctxT(t)
	id := newID()
	registerNode(t, c, id, "n1") // 4 CPUs
	registered := nodeView(t, c, id).GetLastHeartbeatMs()
	res := func(m map[string]int64) *gorayv1.Resources { return &gorayv1.Resources{Amounts: m} }
	tests := []struct {
		name string
		req  *gorayv1.HeartbeatRequest
		want []string
	}{
		{"available above the total", &gorayv1.HeartbeatRequest{Available: res(map[string]int64{"CPU": 50000})},
			[]string{"invalid available", `5 of resource "CPU" available, more than the node's total of 4`}},
		{"available not in the total", &gorayv1.HeartbeatRequest{Available: res(map[string]int64{"GPU": 10000})},
			[]string{"invalid available", `1 of resource "GPU" available, more than the node's total of 0`}},
		{"negative available", &gorayv1.HeartbeatRequest{Available: res(map[string]int64{"CPU": -1})},
			[]string{"invalid available", "outside 0 to"}},
		{"negative store use", &gorayv1.HeartbeatRequest{StoreUsed: -1, StoreCapacity: 10},
			[]string{"invalid store_used", "negative"}},
		{"negative pending count", &gorayv1.HeartbeatRequest{Pending: []*gorayv1.PendingDemand{{Count: -3}}},
			[]string{"invalid pending[0]", "count -3 is negative"}},
		{"pending demand of a million CPUs", &gorayv1.HeartbeatRequest{Pending: []*gorayv1.PendingDemand{{Count: 1}, {Count: 1, Resources: res(map[string]int64{"CPU": 1e6 * resources.Unit})}}},
			[]string{"invalid pending[1].resources", "outside 0 to 65536"}},
		{"too many pending shapes", &gorayv1.HeartbeatRequest{Pending: make([]*gorayv1.PendingDemand, maxPendingDemands+1)},
			[]string{"invalid pending", "4097 demand shapes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock.Advance(time.Second)
			tt.req.NodeId = id.Bytes()
			_, err := c.ReportHeartbeat(ctx, tt.req)
			wantCode(t, err, codes.InvalidArgument, tt.want[0])
			for _, w := range tt.want[1:] {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
			if v := nodeView(t, c, id); v.GetLastHeartbeatMs() != registered || v.GetAvailable().GetAmounts()["CPU"] != 40000 {
				t.Fatalf("a refused heartbeat was recorded: %v", v)
			}
		})
	}
	_, err := c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: id.Bytes(), Available: res(map[string]int64{"CPU": 40000})})
	mustOK(t, err)
	if v := nodeView(t, c, id); v.GetLastHeartbeatMs() == registered {
		t.Fatal("a valid heartbeat was not recorded")
	}
}
