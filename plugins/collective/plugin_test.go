package main

// These tests build the plugin binary and run it as a node does: under a
// real plugin host, over go-plugin's gRPC, configured from an HCL block,
// with ranks in separate plugin processes meeting through a real GCS.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/internal/testservers/gcstest"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/goray-dev/goray/sdk/transport/transporttest"
)

// testPrefix names the segments of these tests (and of this process only).
var testPrefix = fmt.Sprintf("%stt-coll-plugin-%d-", shmem.Prefix, os.Getpid())

// pluginBin is the plugin binary, built once by TestMain.
var pluginBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	code := host.RunWithPlugin(m, "goray-transport-collective", &pluginBin)
	shmem.Default.Purge()
	if left, err := shmem.List(testPrefix); err == nil && len(left) > 0 {
		fmt.Fprintf(os.Stderr, "shared-memory segments left behind: %v\n", left)
		_, _ = shmem.CleanupPrefix(testPrefix)
		code = 1
	}
	return code
}

// node is one plugin process under its own host (as on its own node).
type node struct {
	m    *host.Manager
	conn *grpc.ClientConn
	coll transport.Collective
	tr   transport.Transport
}

// pid returns the plugin process' id.
func (n *node) pid(t *testing.T) int {
	for _, s := range n.m.Plugins() {
		if s.Pid != 0 {
			return s.Pid
		}
	}
	t.Fatal("plugin not running")
	return 0
}

// startNode starts the plugin binary under a host whose plugins see the GCS
// at gcsAddr (empty: none).
func startNode(t *testing.T, gcsAddr, cfg string) *node {
	t.Helper()
	dir, err := os.MkdirTemp("", "gc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Symlink(pluginBin, filepath.Join(dir, "goray-transport-collective")); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf("plugin_dir = %q\n\nplugin \"transport\" \"collective\" {\n  config {\n%s\n  }\n}\n", dir, cfg)
	file := filepath.Join(dir, "node.hcl")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	n, diags := config.Load(file)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	var env []string
	if gcsAddr != "" {
		env = append(env, plugin.EnvGCSAddress+"="+gcsAddr)
	}
	m := host.New(host.Options{PluginDir: n.PluginDir, Blocks: n.Plugins, Files: n.Files(), SocketDir: dir, Env: env,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr})})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if diags := m.Start(ctx); diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		_ = m.Stop(ctx)
	})
	conn, v, err := m.Client(plugin.KindTransport, "collective")
	if err != nil {
		t.Fatal(err)
	}
	return &node{m: m, conn: conn, coll: transport.NewCollectiveClient(conn), tr: transport.NewClient(conn, v)}
}

var nodeConfig = fmt.Sprintf(`segment_prefix = %q
    timeout = "1m"
    listen = "127.0.0.1:0"`, testPrefix)

// TestConformancePlugin runs the transport conformance suite through two
// plugin processes and through one.
func TestConformancePlugin(t *testing.T) {
	a, b := startNode(t, "", nodeConfig), startNode(t, "", nodeConfig)
	t.Run("two-processes", func(t *testing.T) {
		transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) { return a.tr, b.tr },
			transporttest.Options{LargeSize: 16 << 20})
	})
	t.Run("one-process", func(t *testing.T) {
		transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) { return a.tr, a.tr },
			transporttest.Options{LargeSize: 16 << 20})
	})
}

func tensorOf(t *testing.T, n int64, f func(i int64) float32) transport.Tensor {
	t.Helper()
	tn, err := transport.NewTensorIn(testPrefix, transport.Float32, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tn.Free() })
	b, err := tn.Bytes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Release()
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f(i)))
	}
	return tn
}

func checkTensor(t *testing.T, what string, tn transport.Tensor, want func(i int64) float32) {
	t.Helper()
	b, err := tn.Bytes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Release()
	for i := range int64(len(b) / 4) {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])); got != want(i) {
			t.Fatalf("%s: element %d = %v, want %v", what, i, got, want(i))
		}
	}
}

// all runs f for every rank at once.
func all(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	return errs
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestCollectivesAcrossPlugins: three plugin processes form a group through
// the GCS and run every collective; destroying the group leaves nothing in
// the KV.
func TestCollectivesAcrossPlugins(t *testing.T) {
	gcsAddr := gcstest.Start(t)
	const n = 3
	nodes := []*node{startNode(t, gcsAddr, nodeConfig), startNode(t, gcsAddr, nodeConfig), startNode(t, gcsAddr, nodeConfig)}
	group := "plugins"
	members := []string{"actor-a", "actor-b", "actor-c"}
	ctx := ctxT(t, time.Minute)
	must := func(what string, errs []error) {
		t.Helper()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%s: rank %d: %v", what, r, err)
			}
		}
	}
	must("create", all(n, func(r int) error {
		_, err := nodes[r].coll.CreateGroup(ctx, &transport.CreateGroupRequest{Group: group, Rank: r, WorldSize: n, Members: members})
		return err
	}))

	const count = 1<<20 + 3
	tensors := make([]transport.Tensor, n)
	for r := range n {
		tensors[r] = tensorOf(t, count, func(i int64) float32 { return float32(int64(r+1) * (i % 100)) })
	}
	must("allreduce", all(n, func(r int) error {
		_, err := nodes[r].coll.AllReduce(ctx, &transport.AllReduceRequest{Group: group, Rank: r, Tensor: tensors[r]})
		return err
	}))
	for r := range n {
		checkTensor(t, fmt.Sprintf("allreduce rank %d", r), tensors[r], func(i int64) float32 { return float32(6 * (i % 100)) })
	}
	must("broadcast", all(n, func(r int) error {
		tn := tensors[r]
		if r == 2 {
			tn = tensorOf(t, count, func(i int64) float32 { return float32(i % 1000) })
			tensors[2] = tn
		}
		_, err := nodes[r].coll.Broadcast(ctx, &transport.BroadcastRequest{Group: group, Rank: r, Tensor: tn, Root: 2})
		return err
	}))
	for r := range n {
		checkTensor(t, fmt.Sprintf("broadcast rank %d", r), tensors[r], func(i int64) float32 { return float32(i % 1000) })
	}
	outs := make([]transport.Tensor, n)
	must("allgather", all(n, func(r int) error {
		in := tensorOf(t, 10, func(i int64) float32 { return float32(100*r) + float32(i) })
		outs[r] = tensorOf(t, 10*n, func(int64) float32 { return -1 })
		_, err := nodes[r].coll.AllGather(ctx, &transport.AllGatherRequest{Group: group, Rank: r, Input: in, Output: outs[r]})
		return err
	}))
	for r := range n {
		checkTensor(t, fmt.Sprintf("allgather rank %d", r), outs[r], func(i int64) float32 { return float32(100*(i/10) + i%10) })
	}
	must("barrier", all(n, func(r int) error {
		_, err := nodes[r].coll.Barrier(ctx, &transport.BarrierRequest{Group: group, Rank: r})
		return err
	}))

	// Errors keep their identity across the plugin boundary.
	_, err := nodes[0].coll.DestroyGroup(ctx, &transport.DestroyGroupRequest{Group: "nope"})
	var ce *transport.CollectiveError
	if !errors.Is(err, transport.ErrGroupNotFound) || !errors.As(err, &ce) || ce.Group != "nope" || ce.Op != transport.OpDestroyGroup {
		t.Errorf("DestroyGroup of an unknown group: %v", err)
	}

	// Point to point between two members, the communicator data found
	// through the GCS by a third plugin (the owner's).
	id := strings.Repeat("ab", 20)
	meta, err := nodes[0].tr.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: id, Source: "actor-a", Tensors: []transport.Tensor{tensors[0]}})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := nodes[1].tr.CommunicatorMetadata(ctx, &transport.CommunicatorMetadataRequest{ObjectID: id, Source: "actor-a", Destination: "actor-c"})
	if err != nil || !strings.Contains(string(cm.Data), group) {
		t.Fatalf("CommunicatorMetadata: %s, %v", cm.Data, err)
	}
	dst := tensorOf(t, count, func(int64) float32 { return 0 })
	errs := all(2, func(i int) error {
		if i == 0 {
			_, err := nodes[0].tr.Send(ctx, &transport.SendRequest{ObjectID: id, TransportData: meta.TransportData, CommunicatorData: cm.Data})
			return err
		}
		_, err := nodes[2].tr.Receive(ctx, &transport.ReceiveRequest{ObjectID: id, TransportData: meta.TransportData, CommunicatorData: cm.Data,
			Targets: []transport.Tensor{dst}})
		return err
	})
	must("send/receive", errs)
	checkTensor(t, "received", dst, func(i int64) float32 { return float32(i % 1000) })
	if _, err := nodes[0].tr.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: id}); err != nil {
		t.Fatal(err)
	}

	must("destroy", all(n, func(r int) error {
		_, err := nodes[r].coll.DestroyGroup(ctx, &transport.DestroyGroupRequest{Group: group, Rank: r})
		return err
	}))
	kv, closeKV, err := plugin.DialKV(gcsAddr, "transport/collective")
	if err != nil {
		t.Fatal(err)
	}
	defer closeKV()
	if keys, err := kv.Keys(ctx, ""); err != nil || len(keys) != 0 {
		t.Errorf("KV keys after every rank destroyed the group: %v (%v)", keys, err)
	}
}

// TestKillRankMidAllReduce kills (SIGKILL) the plugin process of one of
// three ranks while the other two are in an all-reduce that needs it: they
// fail promptly with ErrRankFailed naming that rank, long before the
// collective timeout (one minute here).
func TestKillRankMidAllReduce(t *testing.T) {
	gcsAddr := gcstest.Start(t)
	const n = 3
	nodes := []*node{startNode(t, gcsAddr, nodeConfig), startNode(t, gcsAddr, nodeConfig), startNode(t, gcsAddr, nodeConfig)}
	group := "doomed"
	ctx := ctxT(t, time.Minute)
	for r, err := range all(n, func(r int) error {
		_, err := nodes[r].coll.CreateGroup(ctx, &transport.CreateGroupRequest{Group: group, Rank: r, WorldSize: n})
		return err
	}) {
		if err != nil {
			t.Fatalf("create: rank %d: %v", r, err)
		}
	}
	errs := make(chan error, 2)
	for _, r := range []int{0, 2} {
		tn := tensorOf(t, 1<<20, func(int64) float32 { return 1 })
		go func() {
			_, err := nodes[r].coll.AllReduce(ctx, &transport.AllReduceRequest{Group: group, Rank: r, Tensor: tn})
			errs <- err
		}()
	}
	time.Sleep(100 * time.Millisecond) // let them block (killing first is the same test)
	start := time.Now()
	if err := syscall.Kill(nodes[1].pid(t), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-errs:
			var ce *transport.CollectiveError
			if !errors.Is(err, transport.ErrRankFailed) || !errors.As(err, &ce) || ce.FailedRank != 1 ||
				!strings.Contains(err.Error(), `"doomed"`) || !strings.Contains(err.Error(), "rank 1") {
				t.Errorf("surviving rank: %v, want ErrRankFailed naming group doomed and rank 1", err)
			}
		case <-time.After(waitfor.Generous):
			t.Fatal("a surviving rank did not fail within 10s of the kill")
		}
	}
	t.Logf("survivors failed %v after the kill", time.Since(start))
	// The survivors can destroy and re-create the group with a new rank 1
	// (the host restarted the killed plugin).
	for _, r := range []int{0, 2} {
		if _, err := nodes[r].coll.DestroyGroup(ctx, &transport.DestroyGroupRequest{Group: group, Rank: r}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, _, err := nodes[1].m.Client(plugin.KindTransport, "collective")
		if err == nil {
			nodes[1].coll = transport.NewCollectiveClient(conn)
			_, err = nodes[1].coll.Barrier(ctxT(t, time.Second), &transport.BarrierRequest{Group: group, Rank: 1})
			if errors.Is(err, transport.ErrGroupNotFound) { // a fresh process: it knows no group
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted plugin does not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling for the restart
	}
	for r, err := range all(n, func(r int) error {
		_, err := nodes[r].coll.CreateGroup(ctx, &transport.CreateGroupRequest{Group: group, Rank: r, WorldSize: n})
		if err == nil {
			_, err = nodes[r].coll.Barrier(ctx, &transport.BarrierRequest{Group: group, Rank: r})
		}
		return err
	}) {
		if err != nil {
			t.Errorf("re-create after the kill: rank %d: %v", r, err)
		}
	}
}

// TestPluginIdentity checks what `goray plugins check` reports.
func TestPluginIdentity(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	rep, err := host.Check(ctx, pluginBin, plugin.KindTransport)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Name != "collective" || rep.Version != "0.1.0" || !rep.Healthy {
		t.Errorf("check report %+v", rep)
	}
	for _, a := range []string{"timeout", "chunk_size", "listen", "kv_namespace", "segment_prefix"} {
		if _, ok := rep.Schema.Attributes[a]; !ok {
			t.Errorf("schema lacks %q", a)
		}
	}
}
