package acceptance

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/waitfor"
)

// TestAuthEveryEntryPoint calls every method of every gRPC service of a
// running cluster (the GCS with its KV, both nodes' raylets with binary
// fetching, a worker's core worker) and both nodes' object data planes
// from a client without the token and from one with a wrong token: each
// is refused, nothing in the cluster changes and every node stays up; then
// the same entry points work with the token.
func TestAuthEveryEntryPoint(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	n1 := joinNode(t, ctx, h, "127.0.0.2", "")
	dir := shortTempDir(t)
	const name = "auth-holder"
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "hold", dir, name)
	var st holdState
	if err := json.Unmarshal([]byte(waitFile(t, j, 30*time.Second, filepath.Join(dir, "ready"))), &st); err != nil {
		t.Fatal(err)
	}

	tok, err := auth.ReadTokenFile(tokenPath)
	if err != nil {
		t.Fatalf("the head did not leave a usable token file: %v", err)
	}
	good, err := auth.New(tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	none, _ := auth.Disabled(nil)
	wrong, err := auth.New("not-the-cluster-token", nil)
	if err != nil {
		t.Fatal(err)
	}

	// Where everything listens, asked with the token.
	gcs := pb.NewGcsClient(dial(t, h.addr, good))
	nodes, err := gcs.GetAllNodes(ctx, &pb.GetAllNodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var raylets, dataPlanes []string
	for _, n := range nodes.GetNodes() {
		raylets = append(raylets, n.GetInfo().GetRayletTcp())
		dataPlanes = append(dataPlanes, n.GetInfo().GetObjectAddr())
	}
	if len(raylets) != 2 {
		t.Fatalf("want 2 nodes, got %v", nodes.GetNodes())
	}
	actors, err := gcs.ListActors(ctx, &pb.ListActorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var worker string
	for _, a := range actors.GetActors() {
		if a.GetName() == name {
			worker = a.GetAddress().GetTcpAddr()
		}
	}
	if worker == "" {
		t.Fatalf("actor %s has no TCP address: %v", name, actors.GetActors())
	}
	jobs, err := gcs.GetAllJobs(ctx, &pb.GetAllJobsRequest{})
	if err != nil || len(jobs.GetJobs()) != 1 {
		t.Fatalf("jobs: %v, %v", jobs.GetJobs(), err)
	}
	binarySum := jobs.GetJobs()[0].GetBinarySha256()
	bigID, err := ids.ParseObjectID(st.BigID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gcs.KVPut(ctx, &pb.KVPutRequest{Ns: "acceptance", Key: "k", Value: []byte("v1"), Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	before := clusterSnapshot(t, ctx, gcs)

	services := map[string][]string{ // service -> endpoints
		"goray.v1.Gcs":        {h.addr},
		"goray.v1.Raylet":     raylets,
		"goray.v1.CoreWorker": {worker},
	}
	for _, c := range []struct {
		name  string
		creds *auth.Credentials
	}{{"no token", none}, {"wrong token", wrong}} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			for svc, endpoints := range services {
				sd := pb.File_goray_proto.Services().ByName(protoreflect.Name(strings.TrimPrefix(svc, "goray.v1.")))
				if sd == nil {
					t.Fatalf("no service %s in goray.proto", svc)
				}
				for _, ep := range endpoints {
					cc := dial(t, ep, c.creds)
					for i := 0; i < sd.Methods().Len(); i++ {
						m := sd.Methods().Get(i)
						full := "/" + svc + "/" + string(m.Name())
						err := invokeEmpty(ctx, cc, full, m.IsStreamingClient() || m.IsStreamingServer())
						if status.Code(err) != codes.Unauthenticated {
							t.Errorf("%s at %s with %s: got %v, want Unauthenticated", full, ep, c.name, err)
						}
						calls++
					}
				}
			}
			for _, addr := range dataPlanes {
				if b, err := readObjectRange(ctx, addr, c.creds, bigID); !errors.Is(err, auth.ErrRefused) || len(b) > 0 {
					t.Errorf("data plane %s with %s: got %d bytes, %v; want refused", addr, c.name, len(b), err)
				}
				// The hostile request of the exploit, sent without any handshake.
				if n := rawRequest(t, addr, bigID); n > len("GRA2")+1+16+1 {
					t.Errorf("data plane %s answered %d bytes to a request without handshake", addr, n)
				}
			}
			t.Logf("%d gRPC calls and %d data-plane connections refused", calls, 2*len(dataPlanes))
		})
	}

	if after := clusterSnapshot(t, ctx, gcs); after != before {
		t.Errorf("refused calls changed the cluster:\nbefore: %s\nafter:  %s", before, after)
	}
	s, r := h.status(ctx)
	if r.code != 0 || s.AliveNodes != 2 {
		t.Fatalf("after the refused calls: %d nodes alive\n%s", s.AliveNodes, r)
	}
	for _, pid := range []int{h.pid, n1.pid} {
		if !alive(pid) {
			t.Errorf("node pid %d died", pid)
		}
	}
	// Refusals are logged once per peer, never with a token.
	logB, _ := os.ReadFile(filepath.Join(h.session, "logs", "node.log"))
	log := string(logB)
	if n := strings.Count(log, "refused a caller"); n != 1 {
		t.Errorf("the head logged %d refusal lines, want 1 (once per peer):\n%s", n, log)
	}
	if strings.Contains(log, tok) || strings.Contains(log, "not-the-cluster-token") {
		t.Error("a token appears in the head's log")
	}
	// The GCS, a process of its own, keeps its own log.
	gcsLogB, _ := os.ReadFile(filepath.Join(h.session, "logs", "gcs.log"))
	gcsLog := string(gcsLogB)
	if n := strings.Count(gcsLog, "refused a caller"); n != 1 {
		t.Errorf("the GCS logged %d refusal lines, want 1 (once per peer):\n%s", n, gcsLog)
	}
	if strings.Contains(gcsLog, tok) || strings.Contains(gcsLog, "not-the-cluster-token") {
		t.Error("a token appears in the GCS's log")
	}

	// With the token, the same entry points work.
	if v, err := gcs.KVGet(ctx, &pb.KVGetRequest{Ns: "acceptance", Key: "k"}); err != nil || string(v.GetValue()) != "v1" {
		t.Errorf("KVGet with the token: %q, %v", v.GetValue(), err)
	}
	for _, ep := range raylets {
		if _, err := pb.NewRayletClient(dial(t, ep, good)).GetNodeStats(ctx, &pb.GetNodeStatsRequest{}); err != nil {
			t.Errorf("GetNodeStats at %s with the token: %v", ep, err)
		}
	}
	fb, err := pb.NewRayletClient(dial(t, raylets[0], good)).FetchBinary(ctx, &pb.FetchBinaryRequest{Sha256: binarySum})
	if err != nil {
		t.Fatal(err)
	}
	var fetched int
	for {
		c, err := fb.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("FetchBinary with the token: %v", err)
		}
		fetched += len(c.GetData())
	}
	if fi, err := os.Stat(testjobBin); err != nil || int64(fetched) != fi.Size() {
		t.Errorf("FetchBinary with the token sent %d bytes; the binary has %v", fetched, fi.Size())
	}
	if _, err := pb.NewCoreWorkerClient(dial(t, worker, good)).ListOwned(ctx, &pb.ListOwnedRequest{}); err != nil {
		t.Errorf("ListOwned on the actor's worker with the token: %v", err)
	}
	var read int
	for _, addr := range dataPlanes {
		if b, err := readObjectRange(ctx, addr, good, bigID); err == nil {
			read += len(b)
		}
	}
	if read != 1<<20 {
		t.Errorf("the 1 MiB object read through the data planes with the token: %d bytes", read)
	}

	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := j.wait(ctx); code != 0 || !strings.Contains(out, "PASS hold") {
		t.Fatalf("testjob hold exited %d:\n%s", code, out)
	}
}

// dial connects to a goray gRPC endpoint with creds.
func dial(t *testing.T, target string, creds *auth.Credentials) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(target, creds.DialOptions(target)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// invokeEmpty calls method with an empty request message.
func invokeEmpty(ctx context.Context, cc *grpc.ClientConn, method string, streaming bool) error {
	ctx, cancel := context.WithTimeout(ctx, waitfor.Generous)
	defer cancel()
	if !streaming {
		return cc.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{})
	}
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method)
	if err != nil {
		return err
	}
	_ = s.SendMsg(&emptypb.Empty{})
	_ = s.CloseSend()
	return s.RecvMsg(&emptypb.Empty{})
}

// clusterSnapshot is what a refused call could have changed: nodes and
// their resources, jobs, actors and the KV store.
func clusterSnapshot(t *testing.T, ctx context.Context, gcs pb.GcsClient) string {
	t.Helper()
	var parts []string
	nodes, err := gcs.GetAllNodes(ctx, &pb.GetAllNodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.GetNodes() {
		parts = append(parts, fmt.Sprintf("node %x %s total=%v", n.GetInfo().GetNodeId()[:4], n.GetInfo().GetState(), n.GetInfo().GetTotal()))
	}
	jobs, err := gcs.GetAllJobs(ctx, &pb.GetAllJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.GetJobs() {
		parts = append(parts, fmt.Sprintf("job %x %s", j.GetJobId()[:4], j.GetState()))
	}
	actors, err := gcs.ListActors(ctx, &pb.ListActorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range actors.GetActors() {
		parts = append(parts, fmt.Sprintf("actor %s %s", a.GetName(), a.GetState()))
	}
	for _, ns := range []string{"acceptance", "", "spill"} {
		keys, err := gcs.KVKeys(ctx, &pb.KVKeysRequest{Ns: ns})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, fmt.Sprintf("kv %q %v", ns, keys.GetKeys()))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// readObjectRange reads a whole object from a node's data plane with
// creds, speaking its framing (see raylet/dataplane.go).
func readObjectRange(ctx context.Context, addr string, creds *auth.Credentials, oid ids.ObjectID) ([]byte, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	c, err := creds.ClientConn(ctx, raw)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var req [4 + ids.ObjectIDSize + 16]byte
	binary.BigEndian.PutUint32(req[:4], 0x67726431)
	copy(req[4:], oid[:])
	binary.BigEndian.PutUint64(req[4+ids.ObjectIDSize:], 0)
	binary.BigEndian.PutUint64(req[12+ids.ObjectIDSize:], ^uint64(0)) // -1: to the end
	if _, err := c.Write(req[:]); err != nil {
		return nil, err
	}
	var hdr [13]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, err
	}
	if hdr[0] != 0 {
		return nil, fmt.Errorf("data plane %s: status %d", addr, hdr[0])
	}
	size := int64(binary.BigEndian.Uint64(hdr[1:]))
	meta := make([]byte, binary.BigEndian.Uint32(hdr[9:]))
	if _, err := io.ReadFull(c, meta); err != nil {
		return nil, err
	}
	b := make([]byte, size)
	_, err = io.ReadFull(c, b)
	return b, err
}

// rawRequest sends the exploit's data-plane request (offset 1, length
// 2^63-1) to addr without a handshake and returns how many bytes came back
// before the server hung up.
func rawRequest(t *testing.T, addr string, oid ids.ObjectID) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var req [4 + ids.ObjectIDSize + 16]byte
	binary.BigEndian.PutUint32(req[:4], 0x67726431)
	copy(req[4:], oid[:])
	binary.BigEndian.PutUint64(req[4+ids.ObjectIDSize:], 1)
	binary.BigEndian.PutUint64(req[12+ids.ObjectIDSize:], 1<<63-1)
	// Padded to the length of a client's handshake answer (a nonce and a
	// MAC), so the server judges it at once instead of waiting out its
	// handshake deadline for the rest.
	_, _ = c.Write(append(req[:], make([]byte, 16+32-len(req))...))
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	var got bytes.Buffer
	_, _ = io.Copy(&got, c)
	return got.Len()
}
