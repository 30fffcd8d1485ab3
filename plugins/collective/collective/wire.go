package collective

// The transport's own TCP protocol. Nothing here goes through gRPC.
//
// Every connection starts with a hello frame saying what it is for:
//
//	join   rank r → rank 0's instance: the control connection of a group
//	       (rendezvous: roster, ready/go; afterwards failure notices)
//	ring   rank r → rank r+1's instance: the data connection of the ring
//	peer   rank r → rank q's instance (q > r): a recursive-doubling link
//	       (see partners), used in both directions
//	fetch  destination → source instance: one point-to-point transfer
//
// and is answered with a reply frame (empty = accepted). Frames are a
// 4-byte big-endian length and a JSON document. On ring connections each
// collective sends one header frame (opHeader) and then data frames: an
// 8-byte header (step index, length) followed by that many raw bytes, read
// straight into shared memory.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/goray-dev/goray/sdk/transport"
)

const (
	// wireVersion versions the records, the transport and communicator
	// data and the TCP protocol together. 2: the roster carries rank 0's
	// chunk size, algorithm and recursive-doubling threshold, and an
	// operation header its algorithm (a version-1 instance would refuse
	// those fields as unknown; it is refused by version instead).
	wireVersion = 2
	// maxFrame bounds a JSON frame (a roster of many members is the largest).
	maxFrame = 8 << 20
	// helloTimeout bounds how long a new connection may take to say what it
	// is for.
	helloTimeout = 10 * time.Second
	// refuseTimeout bounds writing a refusal or a notice to a peer.
	refuseTimeout = time.Second
	// dialTimeout bounds one connection attempt.
	dialTimeout = 5 * time.Second
	// ackByte is what a destination sends once it has every byte.
	ackByte = 0x06
)

// Hello types.
const (
	helloJoin  = "join"
	helloRing  = "ring"
	helloPeer  = "peer"
	helloFetch = "fetch"
)

// Reply kinds; empty means accepted.
const (
	// replyStale: the connection names an incarnation (nonce, epoch) that
	// is not (or no longer) hosted there; re-read the rendezvous and retry.
	replyStale = "stale"
	// replyBad: the request is wrong and retrying does not help.
	replyBad        = "bad_metadata"
	replyAborted    = "aborted"
	replyRankFailed = "rank_failed"
)

// hello is the first frame of a connection.
type hello struct {
	V    int    `json:"v"`
	Type string `json:"type"`
	// fetch
	Object string `json:"object,omitempty"`
	Nonce  string `json:"nonce,omitempty"`
	Token  string `json:"token,omitempty"`
	// join and ring
	Group string `json:"group,omitempty"`
	From  int    `json:"from,omitempty"`
	To    int    `json:"to,omitempty"`
	// ToNonce is the nonce of the member connected to (join: rank 0's from
	// its record; ring: from the roster), so that a connection meant for an
	// earlier incarnation is refused.
	ToNonce string `json:"to_nonce,omitempty"`
	// Epoch (ring) is the group's epoch from the roster.
	Epoch string `json:"epoch,omitempty"`
	// World, Members, FromNonce and Addr (join) describe the joining rank.
	World     int      `json:"world,omitempty"`
	Members   []string `json:"members,omitempty"`
	FromNonce string   `json:"from_nonce,omitempty"`
	Addr      string   `json:"addr,omitempty"`
}

// reply answers a hello; empty means accepted.
type reply struct {
	Kind  string `json:"kind,omitempty"`
	Error string `json:"error,omitempty"`
}

// control frames on a group's control connections.
const (
	ctrlRoster = "roster" // rank 0 → all: the incarnation's epoch, addresses and nonces
	ctrlReady  = "ready"  // all → rank 0: my ring connections are up
	ctrlGo     = "go"     // rank 0 → all: everybody is connected
	ctrlAbort  = "abort"  // a rank failed (sent to rank 0, relayed by it to everyone)
	ctrlLeave  = "leave"  // a rank destroyed its member
)

type ctrlMsg struct {
	Type   string   `json:"type"`
	Epoch  string   `json:"epoch,omitempty"`
	Addrs  []string `json:"addrs,omitempty"`
	Nonces []string `json:"nonces,omitempty"`
	// Chunk, Algo and RDMax (roster) are rank 0's chunk_size, algorithm
	// and recursive_doubling_max, which the whole group uses.
	Chunk int64  `json:"chunk,omitempty"`
	Algo  string `json:"algo,omitempty"`
	RDMax int64  `json:"rd_max,omitempty"`
	// Rank, Kind and Msg describe a failure (abort, leave).
	Rank int    `json:"rank,omitempty"`
	Kind string `json:"kind,omitempty"`
	Msg  string `json:"msg,omitempty"`
}

// record is what a rank publishes in the KV under recordKey.
type record struct {
	V       int      `json:"v"`
	Nonce   string   `json:"nonce"`
	Addr    string   `json:"addr"`
	World   int      `json:"world"`
	Members []string `json:"members,omitempty"`
}

// actorEntry is what a rank publishes in the KV under actorKey once its
// group is formed, so CommunicatorMetadata can find two actors' group.
type actorEntry struct {
	V     int    `json:"v"`
	Rank  int    `json:"rank"`
	Epoch string `json:"epoch"`
}

// opHeader starts every collective on every ring connection; the receiver
// compares it with its own.
type opHeader struct {
	Seq    uint64  `json:"seq"`
	Op     string  `json:"op"`
	DType  string  `json:"dtype,omitempty"`
	Count  int64   `json:"count"`
	Shape  []int64 `json:"shape,omitempty"`
	Reduce string  `json:"reduce,omitempty"`
	Root   int     `json:"root,omitempty"`
	// Algo is set when the collective does not run on the ring
	// (AlgorithmRecursiveDoubling).
	Algo string `json:"algo,omitempty"`
}

func (h opHeader) String() string {
	s := fmt.Sprintf("%s #%d", h.Op, h.Seq)
	if h.DType != "" {
		s += fmt.Sprintf(" of %s%v", h.DType, h.Shape)
	}
	if h.Reduce != "" {
		s += " with " + h.Reduce
	}
	if h.Op == transport.OpBroadcast {
		s += fmt.Sprintf(" from root %d", h.Root)
	}
	if h.Algo != "" {
		s += " by " + h.Algo
	}
	return s
}

func (h opHeader) equal(o opHeader) bool {
	return h.Seq == o.Seq && h.Op == o.Op && h.DType == o.DType && h.Count == o.Count &&
		slices.Equal(h.Shape, o.Shape) && h.Reduce == o.Reduce && h.Root == o.Root && h.Algo == o.Algo
}

// transportData is ExtractMetadataResponse.TransportData.
type transportData struct {
	V      int    `json:"v"`
	Object string `json:"object"`
	// Addr is the source instance's data listener.
	Addr string `json:"addr"`
	// Nonce names the extraction, so stale transport data is refused.
	Nonce   string                 `json:"nonce"`
	Tensors []transport.TensorMeta `json:"tensors"`
}

// commData is CommunicatorMetadataResponse.Data.
type commData struct {
	V      int    `json:"v"`
	Object string `json:"object"`
	// Token pairs a Send with its Receive.
	Token string `json:"token"`
	// Group, Epoch, Src and Dst name the common group of the source and
	// destination actors and their ranks; Group is empty when they have
	// none.
	Group string `json:"group,omitempty"`
	Epoch string `json:"epoch,omitempty"`
	Src   int    `json:"src,omitempty"`
	Dst   int    `json:"dst,omitempty"`
}

// decodeStrict decodes exactly one JSON document into v, refusing unknown
// fields.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

func parseTransportData(id string, data []byte) (*transportData, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: no transport data (a receive needs the source's ExtractMetadata result)", transport.ErrBadMetadata)
	}
	if len(data) > maxFrame {
		return nil, fmt.Errorf("%w: transport data of %d bytes is too large", transport.ErrBadMetadata, len(data))
	}
	var d transportData
	if err := decodeStrict(data, &d); err != nil {
		return nil, fmt.Errorf("%w: transport data does not parse: %v", transport.ErrBadMetadata, err)
	}
	switch {
	case d.V != wireVersion:
		return nil, fmt.Errorf("%w: transport data version %d, want %d", transport.ErrBadMetadata, d.V, wireVersion)
	case d.Object != id:
		return nil, fmt.Errorf("%w: transport data is for object %.40q", transport.ErrBadMetadata, d.Object)
	case d.Addr == "" || d.Nonce == "":
		return nil, fmt.Errorf("%w: transport data lacks the source address or nonce", transport.ErrBadMetadata)
	}
	for i, m := range d.Tensors {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("transport data tensor %d: %w", i, err)
		}
	}
	return &d, nil
}

// parseCommData parses communicator data; empty data is a transfer with
// the empty token and no group.
func parseCommData(id string, data []byte) (*commData, error) {
	if len(data) == 0 {
		return &commData{V: wireVersion, Object: id}, nil
	}
	if len(data) > maxFrame {
		return nil, fmt.Errorf("%w: communicator data of %d bytes is too large", transport.ErrBadMetadata, len(data))
	}
	var d commData
	if err := decodeStrict(data, &d); err != nil {
		return nil, fmt.Errorf("%w: communicator data does not parse: %v", transport.ErrBadMetadata, err)
	}
	if d.V != wireVersion || d.Object != id {
		return nil, fmt.Errorf("%w: communicator data (version %d) is for object %.40q", transport.ErrBadMetadata, d.V, d.Object)
	}
	if d.Group != "" {
		if err := transport.ValidGroup(d.Group, d.Src, 0); err != nil {
			return nil, fmt.Errorf("communicator data: %w", err)
		}
		if d.Dst < 0 || d.Src == d.Dst || d.Epoch == "" {
			return nil, fmt.Errorf("%w: communicator data names ranks %d → %d of group %q (epoch %q)", transport.ErrBadMetadata, d.Src, d.Dst, d.Group, d.Epoch)
		}
	}
	return &d, nil
}

// jsonBytes encodes a record, transport data or communicator data.
func jsonBytes(v any) ([]byte, error) { return json.Marshal(v) }

// writeFrame writes v as a length-prefixed JSON frame.
func writeFrame(w io.Writer, v any) error {
	buf, err := encodeFrame(v)
	if err != nil {
		return err
	}
	_, err = w.Write(buf)
	return err
}

// encodeFrame returns v as a length-prefixed JSON frame.
func encodeFrame(v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	return append(buf, body...), nil
}

// readFrame reads a length-prefixed JSON frame into v.
func readFrame(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrame {
		return fmt.Errorf("frame of %d bytes is too large", size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	return decodeStrict(body, v)
}

// errRefused is a reply's refusal.
type errRefused struct{ r reply }

func (e *errRefused) Error() string { return e.r.Error }

// err turns a refusal into an error.
func (r reply) err() error {
	if r.Kind == "" && r.Error == "" {
		return nil
	}
	return &errRefused{r}
}

// cancelOnDone makes blocked reads and writes on c fail as soon as ctx is
// done; stop undoes it (it reports false if it already fired).
func cancelOnDone(ctx context.Context, c net.Conn) (stop func() bool) {
	return context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
}

// exchange writes req (if not nil) and reads the answer into resp, both
// bounded by ctx.
func exchange(ctx context.Context, c net.Conn, req, resp any) error {
	stop := cancelOnDone(ctx, c)
	defer stop()
	if req != nil {
		if err := writeFrame(c, req); err != nil {
			return ioError(ctx, err)
		}
	}
	if resp != nil {
		if err := readFrame(c, resp); err != nil {
			return ioError(ctx, err)
		}
	}
	return nil
}

// ioError is the context's reason when it ended (that is why the I/O
// failed), else err.
func ioError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return transport.ContextError(ctx)
	}
	return err
}

// Data frame header: step index and payload length.
const dataHeaderLen = 8

func putDataHeader(b []byte, step int, n int64) {
	binary.BigEndian.PutUint32(b[0:4], uint32(step))
	binary.BigEndian.PutUint32(b[4:8], uint32(n))
}

func parseDataHeader(b []byte) (step int, n int64) {
	return int(binary.BigEndian.Uint32(b[0:4])), int64(binary.BigEndian.Uint32(b[4:8]))
}
