package acceptance

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/connlimit"
	"github.com/goray-dev/goray/internal/connlimit/connlimittest"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
)

// fdCount is the number of descriptors process pid holds.
func fdCount(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		t.Fatalf("descriptors of %d: %v", pid, err)
	}
	return len(ents)
}

// procStatusKB reads a "kB" field (VmRSS, VmHWM) of /proc/pid/status.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s of %d: %q", field, pid, v)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// nofile returns the soft and hard RLIMIT_NOFILE of process pid.
func nofile(t *testing.T, pid int) (soft, hard string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "limits"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(strings.TrimPrefix(l, "Max open files")); len(f) >= 2 && strings.HasPrefix(l, "Max open files") {
			return f[0], f[1]
		}
	}
	t.Fatalf("no open files limit in /proc/%d/limits:\n%s", pid, b)
	return "", ""
}

// TestFloodHeldNodeServes: a flood of idle connections and of connections
// sending a byte a second to a node's raylet gRPC port and its object data
// plane, from one peer, held beside a running job: the node's descriptor
// count stays within the per-peer caps of the two listeners (on code
// without them it grows with the flood), `goray status` works, a new
// authenticated call from another peer is served, and the job finishes.
// Then a few hundred calls with megabytes of metadata to the GCS leave its
// peak RSS within a small bound tied to the call count (it grew by
// hundreds of megabytes before header lists were bounded).
func TestFloodHeldNodeServes(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	j, _, release := holdJob(t, h.addr)
	tok, err := auth.ReadTokenFile(tokenPath)
	if err != nil {
		t.Fatal(err)
	}
	good, err := auth.New(tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := pb.NewGcsClient(dial(t, h.addr, good)).GetAllNodes(ctx, &pb.GetAllNodesRequest{})
	if err != nil || len(nodes.GetNodes()) != 1 {
		t.Fatalf("nodes: %v, %v", nodes.GetNodes(), err)
	}
	info := nodes.GetNodes()[0].GetInfo()
	// The node and the GCS run with their descriptor soft limit raised to
	// the hard one (Go's runtime does it at start, to hard - 1; see
	// docs/security.md).
	for _, pid := range []int{h.pid, h.gcsInfo(t).GCSPid} {
		soft, hard := nofile(t, pid)
		s, serr := strconv.ParseUint(soft, 10, 64)
		hd, herr := strconv.ParseUint(hard, 10, 64)
		if soft != hard && (serr != nil || herr != nil || s+1 < hd) {
			t.Errorf("process %d runs with RLIMIT_NOFILE %s of %s", pid, soft, hard)
		}
	}
	targets := []string{info.GetRayletTcp(), info.GetObjectAddr()}

	// The caps bound what one peer holds on each listener; the rest is
	// the node's own (its workers, logs, sockets) with room to move.
	before := fdCount(t, h.pid)
	bound := before + len(targets)*connlimit.DefaultPerPeer + 100
	const idle, slow = 700, 50 // per target: 1,500 connections held at once
	flood := connlimittest.StartFlood(ctx, targets, idle, slow)
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(flood.Stop) }
	t.Cleanup(stop)
	check := func(when string) {
		t.Helper()
		if n := fdCount(t, h.pid); n > bound {
			opened, closed, _ := flood.Counts()
			t.Fatalf("%s: the node holds %d descriptors (%d before the flood, bound %d); the flood opened %d connections, the node closed %d", when, n, before, bound, opened, closed)
		}
	}
	// Held until connections the node accepted were closed at their
	// deadline (not only refused at once over a cap).
	waitFor(t, 3*time.Minute, "the flood held and cut at the deadline", func() bool {
		check("while the flood builds")
		opened, _, held := flood.Counts()
		return opened >= len(targets)*(idle+slow) && held >= 2*connlimit.DefaultPerPeer
	})

	// Authenticated work goes on: the CLI, a new call to the flooded
	// raylet port from another peer, the job.
	if _, r := h.status(ctx); r.code != 0 {
		t.Fatalf("goray status during the flood: %s", r)
	}
	other := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
		return d.DialContext(ctx, "tcp", addr)
	})
	cc, err := rpc.Dial(info.GetRayletTcp(), good, other)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := pb.NewRayletClient(cc).GetNodeStats(ctx, &pb.GetNodeStatsRequest{}); err != nil {
		t.Fatalf("an authenticated call to the raylet during the flood: %v", err)
	}
	check("after the calls")
	release()
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("the job beside the flood: exit %d\n%s", code, out)
	}
	check("after the job")
	stop()

	// Huge headers to the GCS: the peak RSS of its process, reset first,
	// grows by little more than the header limit per concurrent call.
	gcsPid := h.gcsInfo(t).GCSPid
	if err := os.WriteFile(filepath.Join("/proc", strconv.Itoa(gcsPid), "clear_refs"), []byte("5"), 0); err != nil {
		t.Fatalf("resetting the GCS's peak RSS: %v", err)
	}
	rss := procStatusKB(t, gcsPid, "VmRSS")
	const calls, parallel, size = 200, 16, 4 << 20
	block := connlimittest.EncodeHeaders("/goray.v1.Gcs/GetAllNodes", size)
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[connlimittest.Outcome]int{}
	work := make(chan struct{})
	for range parallel {
		wg.Go(func() {
			for range work {
				var d net.Dialer
				c, err := d.DialContext(ctx, "tcp", h.addr)
				if err != nil {
					t.Error(err)
					continue
				}
				out, err := connlimittest.HugeHeaders(ctx, c, block)
				_ = c.Close()
				mu.Lock()
				if err != nil {
					outcomes["error: "+connlimittest.Outcome(err.Error())]++
				} else {
					outcomes[out]++
				}
				mu.Unlock()
			}
		})
	}
	for range calls {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	peak := procStatusKB(t, gcsPid, "VmHWM")
	growth := (peak - rss) << 10
	t.Logf("GCS: RSS %d kB before %d calls with %d bytes of headers, peak %d kB after (%+v)", rss, calls, size, peak, outcomes)
	if limit := int64(32<<20 + calls*auth.MaxServerHeaderList); growth > limit {
		t.Fatalf("the GCS's RSS grew by %d bytes during %d calls with %d bytes of headers (%d at once), want at most %d", growth, calls, size, parallel, limit)
	}
	if _, r := h.status(ctx); r.code != 0 {
		t.Fatalf("goray status after the headers: %s", r)
	}
}
