package core

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/recvseg"
	"github.com/goray-dev/goray/internal/segtrack"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// DefaultTransferTimeout bounds one tensor transfer (as in Ray).
const DefaultTransferTimeout = 60 * time.Second

// ErrTransferFailed matches a tensor transfer that failed or timed out.
var ErrTransferFailed = errors.New("tensor transfer failed")

// KindTransfer is the RemoteError kind of a failed tensor transfer.
const KindTransfer = "transfer"

// TransferError says a tensor transfer failed. It unwraps to the
// transport's error, so errors.Is(err, transport.ErrTimeout) and friends
// work too.
type TransferError struct {
	ObjectID  ids.ObjectID
	Transport string
	Op        string
	Err       error
}

func (e *TransferError) Error() string {
	return fmt.Sprintf("tensor transfer of object %s by transport %q failed in %s: %v", e.ObjectID, e.Transport, e.Op, e.Err)
}

// Is matches ErrTransferFailed.
func (e *TransferError) Is(target error) bool { return target == ErrTransferFailed }

// Unwrap returns the transport's error.
func (e *TransferError) Unwrap() error { return e.Err }

// tensorEnvelope is the value of an object whose tensors a transport
// holds: what a receiver needs to pull them.
type tensorEnvelope struct {
	Transport     string                 `msgpack:"t"`
	ObjectID      string                 `msgpack:"o"`
	Tensors       []transport.TensorMeta `msgpack:"m"`
	TransportData []byte                 `msgpack:"d"`
	Source        string                 `msgpack:"s"`
	Node          []byte                 `msgpack:"n"`
}

// transportProxy is a grpc.ClientConnInterface that reaches a node's
// transport plugin. A plugin of this process's node is called directly
// once a connection to it is ready (transportdirect.go); until then, and
// for other nodes' plugins, the call goes through that node's raylet
// (TransportInvoke), which always knows the plugin's current process. node
// is the plugin's node; nil (or this process's node) means the local one.
type transportProxy struct {
	cw   *CoreWorker
	name string
	node ids.ID
}

func (p *transportProxy) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	in, ok := args.(proto.Message)
	out, ok2 := reply.(proto.Message)
	if !ok || !ok2 {
		return status.Errorf(codes.Internal, "transport proxy: %T/%T are not protobuf messages", args, reply)
	}
	local := p.node.IsNil() || p.node == p.cw.nodeID
	if local {
		if conn := p.cw.directTransport(p.name); conn != nil {
			return conn.Invoke(ctx, method, in, out)
		}
	}
	payload, err := proto.Marshal(in)
	if err != nil {
		return err
	}
	r := p.cw.raylet
	if !local {
		if r, err = p.cw.rayletOf(ctx, p.node); err != nil {
			// The node is dead or unknown: nothing there will answer.
			return status.Errorf(codes.Unavailable, "transport %q on node %s: %v", p.name, p.node.Short(), err)
		}
		// A node declared dead while the call is under way (frozen, cut
		// off) ends it.
		ictx, stop := p.cw.untilNodeDies(ctx, p.node)
		defer stop()
		rep, err := r.TransportInvoke(ictx, &pb.TransportInvokeRequest{Name: p.name, Method: method, Payload: payload})
		if err != nil {
			if ctx.Err() == nil && ictx.Err() != nil {
				_, reason := p.cw.nodeDead(p.node)
				return deadNodeError(p.node, reason, err)
			}
			return err
		}
		return proto.Unmarshal(rep.Payload, out)
	}
	rep, err := r.TransportInvoke(ctx, &pb.TransportInvokeRequest{Name: p.name, Method: method, Payload: payload})
	if err != nil {
		return err
	}
	return proto.Unmarshal(rep.Payload, out)
}

func (p *transportProxy) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "transport proxy: streaming calls are not proxied")
}

type transportClients struct {
	mu    sync.Mutex
	m     map[transportKey]transport.Transport
	infos map[string]*transport.InfoResponse
	// allocated are the segments receives allocated for this process
	// (ReceiveResponse.Allocated) that ReleaseTensors has not freed yet.
	allocated map[string]struct{}
	// direct are the connections to this node's plugins that bypass the
	// raylet (transportdirect.go).
	direct directTransports
}

// transportKey names a transport plugin of a node (the nil id: this
// process's node).
type transportKey struct {
	name string
	node ids.ID
}

// transportInfo returns (and caches) what a transport says about itself.
func (cw *CoreWorker) transportInfo(ctx context.Context, name string) (*transport.InfoResponse, error) {
	cw.transports.mu.Lock()
	info := cw.transports.infos[name]
	cw.transports.mu.Unlock()
	if info != nil {
		return info, nil
	}
	info, err := cw.transport(name).Info(ctx, &transport.InfoRequest{})
	if err != nil {
		return nil, err
	}
	cw.transports.mu.Lock()
	if cw.transports.infos == nil {
		cw.transports.infos = map[string]*transport.InfoResponse{}
	}
	cw.transports.infos[name] = info
	cw.transports.mu.Unlock()
	return info, nil
}

// transport returns a client of the node's transport plugin name.
func (cw *CoreWorker) transport(name string) transport.Transport {
	return cw.transportOn(name, ids.ID{})
}

// transportOn returns a client of transport plugin name on node (the nil
// id or this process's node: the local plugin), reached through that
// node's raylet.
func (cw *CoreWorker) transportOn(name string, node ids.ID) transport.Transport {
	if node == cw.nodeID {
		node = ids.ID{}
	}
	k := transportKey{name: name, node: node}
	cw.transports.mu.Lock()
	defer cw.transports.mu.Unlock()
	if cw.transports.m == nil {
		cw.transports.m = map[transportKey]transport.Transport{}
	}
	t := cw.transports.m[k]
	if t == nil {
		t = transport.NewClient(&transportProxy{cw: cw, name: name, node: node}, transport.APIVersion)
		cw.transports.m[k] = t
	}
	return t
}

// envelopeNode returns the node holding an envelope's tensors (the node
// whose plugin ran ExtractMetadata): the nil id when it is this process's
// node or not recorded.
func (cw *CoreWorker) envelopeNode(env *tensorEnvelope) ids.ID {
	if len(env.Node) == 0 {
		return ids.ID{}
	}
	n, err := ids.FromBytes(env.Node)
	if err != nil || n == cw.nodeID {
		return ids.ID{}
	}
	return n
}

func (cw *CoreWorker) transferTimeout() time.Duration {
	if cw.cfg.TransferTimeout > 0 {
		return cw.cfg.TransferTimeout
	}
	return DefaultTransferTimeout
}

// asTensors accepts the values a tensor-transport method may return.
func asTensors(v any) ([]transport.Tensor, bool) {
	switch t := v.(type) {
	case []transport.Tensor:
		return t, true
	case transport.Tensor:
		return []transport.Tensor{t}, true
	}
	return nil, false
}

// extractTensors registers tensors with a transport right after they were
// produced and returns the object's value (the envelope). The transport
// owns the tensors' memory from now on and frees it at garbage collection.
func (cw *CoreWorker) extractTensors(ctx context.Context, name string, id ids.ObjectID, ts []transport.Tensor) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, cw.transferTimeout())
	defer cancel()
	rep, err := cw.transport(name).ExtractMetadata(ctx, &transport.ExtractMetadataRequest{
		ObjectID: id.String(), Source: cw.id.String(), Tensors: ts, TransferOwnership: true,
	})
	if err != nil {
		// Nobody else will ever free these tensors: let the transport drop
		// whatever it took, and free the segments when it clearly did not
		// take them.
		gctx, gcancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _ = cw.transport(name).GarbageCollect(gctx, &transport.GarbageCollectRequest{ObjectID: id.String()})
		gcancel()
		if errors.Is(err, transport.ErrBadMetadata) || errors.Is(err, transport.ErrNotSupported) || status.Code(err) == codes.Unavailable {
			for _, t := range ts {
				_ = t.Free()
			}
		}
		return nil, &TransferError{ObjectID: id, Transport: name, Op: "extract metadata", Err: err}
	}
	cw.disownTensors(ts) // received ones now belong to the transport
	env := tensorEnvelope{Transport: name, ObjectID: id.String(), Tensors: rep.Tensors, TransportData: rep.TransportData, Source: cw.id.String(), Node: cw.nodeID.Bytes()}
	return msgpack.Marshal(&env)
}

// receiveTensors pulls the tensors of an envelope through its transport,
// within the transfer timeout; a failed transfer is aborted where the
// transport can.
func (cw *CoreWorker) receiveTensors(ctx context.Context, data []byte) ([]transport.Tensor, error) {
	var env tensorEnvelope
	if err := codec.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("goray: undecodable tensor metadata: %w", err)
	}
	id, _ := ids.ParseObjectID(env.ObjectID)
	srcNode := cw.envelopeNode(&env)
	tr := cw.transport(env.Transport)
	rctx, cancel := context.WithTimeout(ctx, cw.transferTimeout())
	defer cancel()
	req := &transport.ReceiveRequest{ObjectID: env.ObjectID, Source: env.Source, Destination: cw.id.String(), Tensors: env.Tensors, TransportData: env.TransportData}
	var sendErr chan error
	recvCtx, stopRecv := context.WithCancel(rctx)
	defer stopRecv()
	sendCtx, stopSend := context.WithCancel(rctx)
	defer stopSend()
	info, err := cw.transportInfo(rctx, env.Transport)
	sameNode := err == nil && info.SameNode
	if err != nil && !srcNode.IsNil() {
		// This node may not even run the transport: the source's node
		// says whether it could ever work from here.
		if si, serr := cw.transportOn(env.Transport, srcNode).Info(rctx, &transport.InfoRequest{}); serr == nil && si.SameNode {
			sameNode = true
		}
	}
	if !srcNode.IsNil() && sameNode {
		return nil, &TransferError{ObjectID: id, Transport: env.Transport, Op: "receive",
			Err: fmt.Errorf("the tensors are on node %s and this process runs on node %s; transport %q only moves tensors within a node (use a transport that works across nodes, such as \"onesided\" or \"collective\")",
				srcNode.Short(), cw.nodeID.Short(), env.Transport)}
	}
	if err == nil && info.TwoSided() {
		// A two-sided transport needs the source to send. The receiver
		// orchestrates both duties: communicator metadata, then Send on the
		// source's node (its plugin holds the tensors; on this node one
		// plugin process acts for every actor) and Receive here, together.
		src := cw.transportOn(env.Transport, srcNode)
		var cm *transport.CommunicatorMetadataResponse
		cm, err = tr.CommunicatorMetadata(rctx, &transport.CommunicatorMetadataRequest{ObjectID: env.ObjectID, Source: env.Source, Destination: cw.id.String()})
		if err == nil {
			req.CommunicatorData = cm.Data
			sendErr = make(chan error, 1)
			go func() {
				_, err := src.Send(sendCtx, &transport.SendRequest{ObjectID: env.ObjectID, Source: env.Source, Destination: cw.id.String(), Tensors: env.Tensors, TransportData: env.TransportData, CommunicatorData: cm.Data})
				if err != nil {
					stopRecv() // the receive cannot complete
				}
				sendErr <- err
			}()
		}
	}
	var rep *transport.ReceiveResponse
	if err == nil {
		rep, err = tr.Receive(recvCtx, req)
	}
	if sendErr != nil {
		if err != nil {
			stopSend() // nobody will take what it sends
		}
		// The receive's outcome decides: a send failing after delivery
		// does not undo it, and a failed receive keeps its own error unless
		// the send failed first (then the receive was only cancelled).
		if serr := <-sendErr; serr != nil && err != nil && errors.Is(err, context.Canceled) {
			err = serr
		}
	}
	if err != nil {
		// Abort only a transfer that was under way and ran out of time: an
		// abort is final for the object in the transport, so a transient
		// failure (the plugin restarting, a cancelled caller) must not
		// poison later reads.
		if errors.Is(err, transport.ErrTimeout) && ctx.Err() == nil {
			// In the background: the caller gets its error at the deadline
			// even when the transport is too stuck to answer the abort.
			reason := fmt.Sprintf("receive by %s timed out after %v", cw.id.Short(), cw.transferTimeout())
			go func() {
				actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer acancel()
				if info, ierr := cw.transportInfo(actx, env.Transport); ierr == nil && info.CanAbort {
					_, _ = tr.Abort(actx, &transport.AbortRequest{ObjectID: env.ObjectID, Reason: reason})
				}
			}()
		}
		return nil, &TransferError{ObjectID: id, Transport: env.Transport, Op: "receive", Err: err}
	}
	if len(rep.Allocated) > 0 {
		cw.transports.mu.Lock()
		if cw.transports.allocated == nil {
			cw.transports.allocated = map[string]struct{}{}
		}
		for _, s := range rep.Allocated {
			cw.transports.allocated[s] = struct{}{}
		}
		cw.transports.mu.Unlock()
		// On disk too, so the raylet unlinks them if this process dies
		// before it releases them.
		if dir := cw.segLedger(); dir != "" {
			if err := recvseg.Add(dir, rep.Allocated...); err != nil {
				cw.log.Warn("recording received tensor segments failed; they leak if this process dies before releasing them", "error", err)
			}
		}
	}
	return rep.Tensors, nil
}

// ReleaseTensors says the program is done with tensors it received from a
// transport (a Get or a task argument): segments a receive allocated for
// this process (ReceiveResponse.Allocated, for example a copy that came
// from another node) are unlinked; tensors that share a source's memory
// (zero copy) are left to their source. Tensors this process did not receive are
// never unlinked. It returns the first unlink error.
func (cw *CoreWorker) ReleaseTensors(ts []transport.Tensor) error {
	var first error
	for _, t := range ts {
		seg := t.Buffer.Segment
		if seg == "" {
			continue
		}
		cw.transports.mu.Lock()
		_, mine := cw.transports.allocated[seg]
		delete(cw.transports.allocated, seg)
		cw.transports.mu.Unlock()
		if !mine {
			// Its idle mapping stays: a segment that comes back from the
			// node's pool is then read again without a page fault, and
			// one that is unlinked is unmapped by the cache's sweep.
			continue
		}
		// Free also takes it out of the ledger (segtrack).
		if err := t.Free(); err != nil && !errors.Is(err, fs.ErrNotExist) && first == nil {
			first = err
		}
	}
	return first
}

// segLedger is the directory recording the segments receives allocated
// for this process and it has not released ("" without a session).
func (cw *CoreWorker) segLedger() string {
	if cw.cfg.SessionDir == "" {
		return ""
	}
	return recvseg.Dir(cw.cfg.SessionDir, cw.id)
}

// disownTensors forgets the segments of ts (created or received here):
// they were handed to a transport, which frees them from now on.
func (cw *CoreWorker) disownTensors(ts []transport.Tensor) {
	var gone []string
	cw.transports.mu.Lock()
	for _, t := range ts {
		if t.Buffer.Segment != "" {
			delete(cw.transports.allocated, t.Buffer.Segment)
			gone = append(gone, t.Buffer.Segment)
		}
	}
	cw.transports.mu.Unlock()
	if dir := cw.segLedger(); dir != "" && len(gone) > 0 {
		recvseg.Remove(dir, gone...)
	}
}

// trackSegments records in the ledger the tensor segments this process
// creates (transport.NewTensor) until it frees or hands them over, so the
// raylet unlinks them if the process dies first.
func (cw *CoreWorker) trackSegments() {
	dir := cw.segLedger()
	if dir == "" {
		return
	}
	segtrack.Set(func(name string) {
		if err := recvseg.Add(dir, name); err != nil {
			cw.log.Warn("recording a tensor segment failed; it leaks if this process dies before freeing it", "segment", name, "error", err)
		}
	}, func(name string) { recvseg.Remove(dir, name) })
}

// releaseSegments unlinks every tensor segment this process still owns —
// received and never released, or created and never freed or handed to a
// transport — as it closes: nobody else can use them.
func (cw *CoreWorker) releaseSegments() {
	segtrack.Set(nil, nil)
	cw.transports.mu.Lock()
	segs := cw.transports.allocated
	cw.transports.allocated = nil
	cw.transports.mu.Unlock()
	// Received ones by name (also when recording them in the ledger
	// failed), then whatever else the ledger lists (created ones).
	for s := range segs {
		shmem.Default.Forget(s)
		_ = shmem.Unlink(s)
	}
	if dir := cw.segLedger(); dir != "" {
		if _, err := recvseg.Sweep(dir); err != nil {
			cw.log.Warn("unlinking this process's tensor segments failed", "error", err)
		}
	}
}

// collectTensors tells the transport that an object's last reference is
// gone (owner side). It reports whether to try again later (the plugin was
// unavailable or did not answer in time).
func (cw *CoreWorker) collectTensors(ctx context.Context, data []byte) (retry bool) {
	var env tensorEnvelope
	if err := codec.Unmarshal(data, &env); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The source's node collects: its plugin instance registered (pinned,
	// owns) the tensors, whichever node the owner runs on.
	node := cw.envelopeNode(&env)
	if !node.IsNil() {
		if dead, _ := cw.nodeDead(node); dead {
			return false // its plugin and memory went with it
		}
	}
	_, err := cw.transportOn(env.Transport, node).GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: env.ObjectID, TransportData: env.TransportData})
	if err == nil {
		return false
	}
	c := status.Code(err)
	retry = c == codes.Unavailable || errors.Is(err, transport.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)
	if retry && !node.IsNil() {
		if _, nerr := cw.nodeInfo(ctx, node); nerr != nil {
			retry = false // the node left the cluster
		} else if dead, _ := cw.nodeDead(node); dead {
			retry = false
		}
	}
	cw.log.Warn("tensor garbage collection failed", "object", env.ObjectID, "transport", env.Transport, "retry", retry, "error", err)
	return retry
}

// PutTensors stores tensors by a transport: the object's value is the
// transport's metadata; readers pull the tensors through the transport.
func (cw *CoreWorker) PutTensors(ctx context.Context, name string, ts []transport.Tensor) (*Handle, error) {
	id := ids.ObjectIDFor(cw.idgen.Next(), 0)
	env, err := cw.extractTensors(ctx, name, id, ts)
	if err != nil {
		return nil, err
	}
	cw.objects.newOwned(id, nil, 1)
	cw.objects.complete(id, &pb.ReturnObject{ObjectId: id.Bytes(), Metadata: codec.FormatTransport.Meta(), Data: env, Size: int64(len(env))}, nil, false)
	return cw.wrapHandle(id, cw.addr), nil
}

// AssignTensors stores received tensors into ptr (*[]transport.Tensor,
// *transport.Tensor or *any).
func AssignTensors(ptr any, ts []transport.Tensor) error {
	switch p := ptr.(type) {
	case *[]transport.Tensor:
		*p = ts
	case *transport.Tensor:
		if len(ts) != 1 {
			return &codec.TypeError{Want: "transport.Tensor", Got: fmt.Sprintf("%d tensors", len(ts))}
		}
		*p = ts[0]
	case *any:
		*p = ts
	default:
		return &codec.TypeError{Want: fmt.Sprintf("%T", ptr)[1:], Got: "tensors (declare the value as []transport.Tensor)"}
	}
	return nil
}

// checkTransports fails when a transport an actor declares is not
// registered on this process's node (the actor's worker checks it before
// constructing the actor).
func (cw *CoreWorker) checkTransports(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	st, err := cw.raylet.GetNodeStats(ctx, &pb.GetNodeStatsRequest{})
	if err != nil {
		return err
	}
	have := map[string]bool{}
	var list []string
	for _, p := range st.Plugins {
		if p.Kind == "transport" && p.State != "failed" && p.State != "stopped" {
			have[p.Name] = true
			list = append(list, p.Name)
		}
	}
	for _, n := range names {
		if !have[n] {
			return fmt.Errorf("transport %q is not registered on node %s (registered transports: %v); add a plugin \"transport\" %q block to the node's config", n, cw.nodeID.Short(), list, n)
		}
	}
	return nil
}
