package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/goray-dev/goray/internal/proto/storagev1"
	"github.com/goray-dev/goray/sdk/plugin"
)

// APIVersion is the newest version of the storage plugin protocol this SDK
// speaks.
const APIVersion = 1

// listBatch is how many objects one List message carries, and deleteBatch
// how many keys one Delete call sends.
const (
	listBatch   = 1000
	deleteBatch = 1000
)

// Register registers impl as the Storage gRPC service (API version 1) on s.
// Serve does this for plugins; tests and embedders can use it with their
// own server.
func Register(s *grpc.Server, impl Storage) {
	pb.RegisterStorageServer(s, &server{impl: impl})
}

// NewClient returns a Storage backed by a storage plugin reachable over
// conn, which speaks the negotiated apiVersion. Errors keep their identity:
// errors.Is(err, ErrNotFound) works on a key missing in the plugin, a
// *StorageError names the operation and key, and a plugin that is gone or
// restarting gives ErrUnavailable. Context cancellation and deadlines
// travel to the plugin. Object bytes stream in chunks of ChunkSize.
//
// conn is usually the *grpc.ClientConn of a plugin; any
// grpc.ClientConnInterface works.
func NewClient(conn grpc.ClientConnInterface, apiVersion int) Storage {
	return &client{c: pb.NewStorageClient(conn), version: apiVersion}
}

// ---------------------------------------------------------------- errors

// errorTable is the storage kind's error table: what each sentinel error is
// called on the wire and which gRPC code carries it.
var errorTable = plugin.ErrorTable{
	{Name: "not_found", Errors: []error{ErrNotFound}, Code: codes.NotFound},
	{Name: "bad_key", Errors: []error{ErrBadKey}, Code: codes.InvalidArgument},
	{Name: "size_mismatch", Errors: []error{ErrSizeMismatch}, Code: codes.FailedPrecondition},
	{Name: "invalid_range", Errors: []error{ErrInvalidRange}, Code: codes.OutOfRange},
	{Name: "permission", Errors: []error{ErrPermission}, Code: codes.PermissionDenied, AlsoCodes: []codes.Code{codes.Unauthenticated}},
	{Name: "unavailable", Errors: []error{ErrUnavailable}, Code: codes.Unavailable},
	{Name: "deadline", Errors: []error{context.DeadlineExceeded}, Code: codes.DeadlineExceeded},
	{Name: "canceled", Errors: []error{context.Canceled}, Code: codes.Canceled},
}

// toStatus turns an implementation's error into a gRPC status error that
// carries an ErrorInfo detail.
func toStatus(op, key string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return err // already a status (a panic turned into Internal)
	}
	kind, code := errorTable.Classify(err)
	msg := err.Error()
	var se *StorageError
	if errors.As(err, &se) {
		if se.Op != "" {
			op = se.Op
		}
		if se.Key != "" {
			key = se.Key
		}
		if se.Err != nil {
			msg = se.Err.Error()
		}
	}
	full := (&StorageError{Op: op, Key: key, Err: errors.New(msg)}).Error()
	return plugin.StatusError(code, full, &pb.ErrorInfo{Kind: kind, Op: op, Key: key, Message: msg})
}

// fromStatus turns a gRPC error from the plugin back into a *StorageError
// whose cause matches the original sentinel errors. ctx is the caller's: a
// call cancelled while ctx is alive lost its connection (the plugin died and
// the host is restarting it), which is ErrUnavailable.
func fromStatus(ctx context.Context, op, key string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return &StorageError{Op: op, Key: key, Err: err}
	}
	if info, ok := plugin.DetailOf[*pb.ErrorInfo](st); ok {
		if info.Op != "" {
			op = info.Op
		}
		if info.Key != "" {
			key = info.Key
		}
		re := errorTable.Remote(info.Message, []string{info.Kind})
		if re.Kind == "" {
			re = errorTable.Remote(info.Message, nil, err)
		}
		return &StorageError{Op: op, Key: key, Err: re}
	}
	k, ok := errorTable.ForCode(plugin.LostConnection(ctx, st).Code())
	if !ok {
		return &StorageError{Op: op, Key: key, Err: err}
	}
	// No detail: the plugin is gone or restarting (Unavailable), an older
	// plugin, a deadline hit on the way. Keep the status error in the chain
	// so callers can still inspect its code.
	return &StorageError{Op: op, Key: key,
		Err: errorTable.Remote(fmt.Sprintf("%s (%s)", st.Message(), st.Code()), []string{k.Name}, err)}
}

// ---------------------------------------------------------------- server

// server adapts a Storage to the generated gRPC service. A panic in the
// implementation becomes an Internal error instead of killing the plugin.
type server struct {
	pb.UnimplementedStorageServer
	impl Storage
}

func (s *server) Info(ctx context.Context, _ *pb.InfoRequest) (_ *pb.InfoResponse, err error) {
	defer plugin.Recover(&err, "storage %s of %q", OpInfo, "")
	r, err := s.impl.Info(ctx, &InfoRequest{})
	if err != nil {
		return nil, toStatus(OpInfo, "", err)
	}
	if r == nil {
		r = &InfoResponse{}
	}
	return &pb.InfoResponse{Name: r.Name, Location: r.Location}, nil
}

func (s *server) Write(stream pb.Storage_WriteServer) (err error) {
	first, err := stream.Recv()
	if err != nil {
		return toStatus(OpWrite, "", err)
	}
	h := first.GetHeader()
	if h == nil {
		return status.Error(codes.InvalidArgument, "storage write: the first message must be a header")
	}
	key := h.GetKey()
	defer plugin.Recover(&err, "storage %s of %q", OpWrite, key)
	body := &streamBody{stream: stream, size: h.GetSize(), left: h.GetSize()}
	r, err := s.impl.Write(stream.Context(), &WriteRequest{Key: key, Size: h.GetSize(), Body: body})
	if err != nil {
		return toStatus(OpWrite, key, err)
	}
	if r == nil {
		r = &WriteResponse{}
	}
	return stream.SendAndClose(&pb.WriteResponse{Url: r.URL})
}

// errClientAborted is the cause a Write's Body fails with when the client
// gave up on the write.
var errClientAborted = errors.New("the client aborted the write")

// streamBody is a Write's Body on the plugin side: the chunks of the stream.
// It hands out the last byte only once the client has confirmed the end of
// the object (closed its side of the stream without an abort), so an
// implementation that stores what it read never stores an aborted object.
type streamBody struct {
	stream pb.Storage_WriteServer
	size   int64
	left   int64 // bytes not yet received
	cur    []byte
	ended  bool // the client confirmed the end of the object
	err    error
}

func (b *streamBody) Read(p []byte) (int, error) {
	for len(b.cur) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		if b.left == 0 {
			if !b.ended { // an empty object
				if b.err = b.end(); b.err != nil {
					return 0, b.err
				}
			}
			return 0, io.EOF
		}
		b.cur, b.err = b.next()
		if b.err != nil {
			b.cur = nil
			return 0, b.err
		}
	}
	n := copy(p, b.cur)
	b.cur = b.cur[n:]
	return n, nil
}

// next receives the next chunk; with the last one it also receives the end
// of the stream.
func (b *streamBody) next() ([]byte, error) {
	for {
		chunk, err := b.recv()
		if err != nil {
			return nil, err
		}
		if int64(len(chunk)) > b.left {
			return nil, fmt.Errorf("%w: the client sent more than %d bytes", ErrSizeMismatch, b.size)
		}
		if len(chunk) == 0 {
			continue
		}
		b.left -= int64(len(chunk))
		if b.left > 0 {
			return chunk, nil
		}
		if err := b.end(); err != nil {
			return nil, err
		}
		return chunk, nil
	}
}

// end receives the end of the stream once every byte has arrived: nil if
// the client closed its side, else why the write must fail.
func (b *streamBody) end() error {
	for {
		extra, err := b.recv()
		if err == io.EOF {
			b.ended = true
			return nil
		}
		if err != nil {
			return err
		}
		if len(extra) > 0 {
			return fmt.Errorf("%w: the client sent more than %d bytes", ErrSizeMismatch, b.size)
		}
	}
}

// recv returns the next chunk, io.EOF at the end of the stream, or why the
// write cannot go on.
func (b *streamBody) recv() ([]byte, error) {
	m, err := b.stream.Recv()
	if err == io.EOF {
		if b.left > 0 {
			return nil, fmt.Errorf("%w: the client sent %d of %d bytes", ErrSizeMismatch, b.size-b.left, b.size)
		}
		return nil, io.EOF
	}
	if err != nil {
		if ctxErr := b.stream.Context().Err(); ctxErr != nil {
			return nil, fmt.Errorf("the client went away: %w", ctxErr)
		}
		return nil, fmt.Errorf("receiving the object: %w", err)
	}
	switch msg := m.GetMsg().(type) {
	case *pb.WriteRequest_Chunk:
		return msg.Chunk, nil
	case *pb.WriteRequest_Abort:
		cause := errClientAborted
		if k, ok := errorTable.Named(msg.Abort.GetKind()); ok {
			cause = k.Errors[0]
		}
		return nil, fmt.Errorf("%w: %s", cause, msg.Abort.GetMessage())
	}
	return nil, fmt.Errorf("%w: unexpected %T message in a write stream", errClientAborted, m.GetMsg())
}

func (s *server) Read(req *pb.ReadRequest, stream pb.Storage_ReadServer) (err error) {
	key := req.GetKey()
	defer plugin.Recover(&err, "storage %s of %q", OpRead, key)
	ctx := stream.Context()
	r, err := s.impl.Read(ctx, &ReadRequest{Key: key, Offset: req.GetOffset(), Length: req.GetLength()})
	if err != nil {
		return toStatus(OpRead, key, err)
	}
	if r == nil || r.Body == nil {
		if r != nil && r.Size != 0 {
			return status.Errorf(codes.Internal, "storage read of %q: the implementation returned no body for %d bytes", key, r.Size)
		}
		return stream.Send(&pb.ReadResponse{Msg: &pb.ReadResponse_Header{Header: &pb.ReadHeader{Size: 0}}})
	}
	defer r.Body.Close()
	if err := stream.Send(&pb.ReadResponse{Msg: &pb.ReadResponse_Header{Header: &pb.ReadHeader{Size: r.Size}}}); err != nil {
		return err
	}
	buf := make([]byte, min(r.Size, ChunkSize))
	var sent int64
	for sent < r.Size {
		n, rerr := io.ReadFull(r.Body, buf[:min(int64(len(buf)), r.Size-sent)])
		if n > 0 {
			if err := stream.Send(&pb.ReadResponse{Msg: &pb.ReadResponse_Chunk{Chunk: buf[:n]}}); err != nil {
				return err
			}
			sent += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			if sent < r.Size {
				return status.Errorf(codes.DataLoss, "storage read of %q: the body ended after %d of %d bytes", key, sent, r.Size)
			}
			break
		}
		if rerr != nil {
			return toStatus(OpRead, key, rerr)
		}
	}
	return nil
}

// ReadInto maps the caller's target range and copies the implementation's
// Read body into it. The target must be the object store's arena memfd
// (openArena); anything else is refused before a byte is read.
func (s *server) ReadInto(ctx context.Context, req *pb.ReadIntoRequest) (_ *pb.ReadIntoResponse, err error) {
	key := req.GetKey()
	defer plugin.Recover(&err, "storage %s of %q", OpReadInto, key)
	length, toff := req.GetLength(), req.GetTargetOffset()
	if length < 0 || toff < 0 || req.GetTargetPath() == "" {
		return nil, status.Errorf(codes.InvalidArgument, "storage read into: length %d, target %q at %d", length, req.GetTargetPath(), toff)
	}
	target, err := openArena(req.GetTargetPath())
	if errors.Is(err, ErrPermission) {
		return nil, toStatus(OpReadInto, key, err)
	}
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "storage read into %s: %v", req.GetTargetPath(), err)
	}
	defer target.Close()
	r, err := s.impl.Read(ctx, &ReadRequest{Key: key, Offset: req.GetOffset(), Length: length})
	if err != nil {
		return nil, toStatus(OpRead, key, err)
	}
	if r == nil || r.Body == nil {
		if length != 0 {
			return nil, status.Errorf(codes.Internal, "storage read of %q: the implementation returned no body for %d bytes", key, length)
		}
		return &pb.ReadIntoResponse{}, nil
	}
	defer r.Body.Close()
	if r.Size != length {
		return nil, status.Errorf(codes.Internal, "storage read of %q: the implementation returned %d bytes, want %d", key, r.Size, length)
	}
	if length == 0 {
		return &pb.ReadIntoResponse{}, nil
	}
	dst, unmap, err := mapTarget(target, toff, length)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "storage read into %s at %d: %v", req.GetTargetPath(), toff, err)
	}
	defer unmap()
	if _, err := io.ReadFull(ContextReader(ctx, r.Body), dst); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, status.Errorf(codes.DataLoss, "storage read of %q: the body ended before %d bytes", key, length)
		}
		return nil, toStatus(OpRead, key, err)
	}
	return &pb.ReadIntoResponse{}, nil
}

// arenaLink is what /proc/<pid>/fd/<n> of the object store's arena reads
// as.
const arenaLink = "/memfd:" + ArenaName + " (deleted)"

// openArena opens path read-write if it is the object store's arena: a
// memfd named ArenaName (its /proc fd link reads "/memfd:goray-store
// (deleted)", it is linked in no directory, and it takes seals). Anything
// else (a regular file, a /dev/shm file, a device, another memfd) is
// refused with an error matching ErrPermission, so ReadInto writes only
// into the object store's own memory. The link is checked before opening
// (opening some files has effects) and what was opened is checked again.
func openArena(path string) (*os.File, error) {
	refuse := func(what string) error {
		return fmt.Errorf("%w: ReadInto writes only into goray's object store (a memfd named %q), and target %s is %s",
			ErrPermission, ArenaName, path, what)
	}
	link, err := os.Readlink(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, refuse("not a /proc/<pid>/fd/<n> link")
	}
	if link != arenaLink {
		return nil, refuse(fmt.Sprintf("%q", link))
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	fd := int(f.Fd())
	if got, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err != nil || got != arenaLink {
		f.Close()
		return nil, refuse(fmt.Sprintf("%q once opened", got))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 0 {
		f.Close()
		return nil, refuse("a file linked in a directory, not a memfd")
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0); err != nil {
		f.Close()
		return nil, refuse("not a memfd (it takes no seals)")
	}
	return f, nil
}

// mapTarget maps [off, off+length) of the open file f read-write (shared)
// and returns that range and the unmap.
func mapTarget(f *os.File, off, length int64) ([]byte, func(), error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if off+length > fi.Size() {
		return nil, nil, fmt.Errorf("range [%d, %d) is past the end of the target (%d bytes)", off, off+length, fi.Size())
	}
	page := int64(os.Getpagesize())
	base := off / page * page
	m, err := unix.Mmap(int(f.Fd()), base, int(off-base+length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return m[off-base:], func() { _ = unix.Munmap(m) }, nil
}

func (s *server) Delete(ctx context.Context, req *pb.DeleteRequest) (_ *pb.DeleteResponse, err error) {
	defer plugin.Recover(&err, "storage %s of %q", OpDelete, "")
	_, err = s.impl.Delete(ctx, &DeleteRequest{Keys: req.GetKeys()})
	if err != nil {
		return nil, toStatus(OpDelete, "", err)
	}
	return &pb.DeleteResponse{}, nil
}

func (s *server) List(req *pb.ListRequest, stream pb.Storage_ListServer) (err error) {
	prefix := req.GetPrefix()
	defer plugin.Recover(&err, "storage %s of %q", OpList, prefix)
	r, err := s.impl.List(stream.Context(), &ListRequest{Prefix: prefix})
	if err != nil {
		return toStatus(OpList, prefix, err)
	}
	if r == nil {
		r = &ListResponse{}
	}
	objs := r.Objects
	for first := true; first || len(objs) > 0; first = false {
		n := min(len(objs), listBatch)
		batch := make([]*pb.ObjectInfo, n)
		for i, o := range objs[:n] {
			batch[i] = &pb.ObjectInfo{Key: o.Key, Size: o.Size}
		}
		if err := stream.Send(&pb.ListResponse{Objects: batch}); err != nil {
			return err
		}
		objs = objs[n:]
	}
	return nil
}

// ---------------------------------------------------------------- client

type client struct {
	c       pb.StorageClient
	version int
}

func (c *client) Info(ctx context.Context, _ *InfoRequest) (*InfoResponse, error) {
	r, err := c.c.Info(ctx, &pb.InfoRequest{})
	if err != nil {
		return nil, fromStatus(ctx, OpInfo, "", err)
	}
	return &InfoResponse{Name: r.GetName(), Location: r.GetLocation()}, nil
}

func (c *client) Write(ctx context.Context, req *WriteRequest) (*WriteResponse, error) {
	if req == nil {
		req = &WriteRequest{}
	}
	key := req.Key
	// Keys that break the rules may not even encode (invalid UTF-8).
	if err := ValidKey(key); err != nil {
		return nil, &StorageError{Op: OpWrite, Key: key, Err: err}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.c.Write(ctx)
	if err != nil {
		return nil, fromStatus(ctx, OpWrite, key, err)
	}
	// A failed Send means the stream is over: the plugin's answer (or the
	// reason) is in the status.
	failed := func() (*WriteResponse, error) {
		_, err := stream.CloseAndRecv()
		if err == nil {
			err = status.Error(codes.Internal, "the plugin ended the write before receiving the whole object")
		}
		return nil, fromStatus(ctx, OpWrite, key, err)
	}
	if err := stream.Send(&pb.WriteRequest{Msg: &pb.WriteRequest_Header{Header: &pb.WriteHeader{Key: key, Size: req.Size}}}); err != nil {
		return failed()
	}
	body := ExactReader(req.Body, req.Size)
	buf := make([]byte, min(max(req.Size, 1), ChunkSize))
	for {
		n, rerr := io.ReadFull(body, buf)
		if rerr == nil || rerr == io.ErrUnexpectedEOF {
			if err := stream.Send(&pb.WriteRequest{Msg: &pb.WriteRequest_Chunk{Chunk: buf[:n]}}); err != nil {
				return failed()
			}
		}
		if rerr == nil {
			continue
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		// The body failed or has the wrong size: abort, wait until the
		// plugin has cleaned up, and report why.
		return nil, c.abort(stream, key, rerr)
	}
	// The whole object is sent. A context that ended meanwhile must not let
	// the plugin commit it.
	if err := ctx.Err(); err != nil {
		return nil, c.abort(stream, key, err)
	}
	r, err := stream.CloseAndRecv()
	if err != nil {
		return nil, fromStatus(ctx, OpWrite, key, err)
	}
	return &WriteResponse{URL: r.GetUrl()}, nil
}

// abort ends a write whose body failed with cause: it tells the plugin, waits
// for its answer (it has discarded the object by then) and returns cause.
func (c *client) abort(stream pb.Storage_WriteClient, key string, cause error) error {
	kind, _ := errorTable.Classify(cause)
	if stream.Send(&pb.WriteRequest{Msg: &pb.WriteRequest_Abort{Abort: &pb.WriteAbort{Kind: kind, Message: cause.Error()}}}) == nil {
		_, _ = stream.CloseAndRecv()
	}
	return wrap(OpWrite, key, cause)
}

func (c *client) Read(ctx context.Context, req *ReadRequest) (*ReadResponse, error) {
	if req == nil {
		req = &ReadRequest{}
	}
	key := req.Key
	if err := ValidKey(key); err != nil {
		return nil, &StorageError{Op: OpRead, Key: key, Err: err}
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.c.Read(ctx, &pb.ReadRequest{Key: key, Offset: req.Offset, Length: req.Length})
	if err != nil {
		cancel()
		return nil, fromStatus(ctx, OpRead, key, err)
	}
	first, err := stream.Recv()
	if err != nil {
		cancel()
		return nil, fromStatus(ctx, OpRead, key, err)
	}
	h := first.GetHeader()
	if h == nil || h.GetSize() < 0 {
		cancel()
		return nil, Errorf(OpRead, key, "the plugin sent %T instead of a header", first.GetMsg())
	}
	return &ReadResponse{Size: h.GetSize(), Body: &readBody{ctx: ctx, stream: stream, cancel: cancel, key: key, size: h.GetSize(), left: h.GetSize()}}, nil
}

// ReadInto implements ReaderInto. A plugin built before ReadInto existed
// gives ErrNotSupported.
func (c *client) ReadInto(ctx context.Context, req *ReadIntoRequest) (*ReadIntoResponse, error) {
	if err := ValidKey(req.Key); err != nil {
		return nil, &StorageError{Op: OpReadInto, Key: req.Key, Err: err}
	}
	_, err := c.c.ReadInto(ctx, &pb.ReadIntoRequest{Key: req.Key, Offset: req.Offset, Length: req.Length, TargetPath: req.TargetPath, TargetOffset: req.TargetOffset})
	if status.Code(err) == codes.Unimplemented {
		return nil, &StorageError{Op: OpReadInto, Key: req.Key, Err: ErrNotSupported}
	}
	if err != nil {
		return nil, fromStatus(ctx, OpReadInto, req.Key, err)
	}
	return &ReadIntoResponse{}, nil
}

// readBody is a Read's Body on the host side.
type readBody struct {
	ctx    context.Context
	stream pb.Storage_ReadClient
	cancel context.CancelFunc
	key    string
	size   int64
	left   int64 // bytes not yet received
	cur    []byte
	err    error
}

func (b *readBody) fill() error {
	for len(b.cur) == 0 {
		if b.err != nil {
			return b.err
		}
		if b.left == 0 {
			b.err = io.EOF
			b.cancel()
			return b.err
		}
		// Chunks the connection has buffered do not outlive the context.
		if err := b.ctx.Err(); err != nil {
			b.err = &StorageError{Op: OpRead, Key: b.key, Err: err}
			b.cancel()
			return b.err
		}
		m, err := b.stream.Recv()
		switch {
		case err == io.EOF:
			b.err = Errorf(OpRead, b.key, "%w: the plugin ended the stream after %d of %d bytes", ErrUnavailable, b.size-b.left, b.size)
		case err != nil:
			b.err = fromStatus(b.ctx, OpRead, b.key, err)
		case int64(len(m.GetChunk())) > b.left:
			b.err = Errorf(OpRead, b.key, "the plugin sent more than the %d bytes it announced", b.size)
		default:
			b.cur = m.GetChunk()
			b.left -= int64(len(b.cur))
			continue
		}
		b.cancel()
		return b.err
	}
	return nil
}

func (b *readBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := b.fill(); err != nil {
		return 0, err
	}
	n := copy(p, b.cur)
	b.cur = b.cur[n:]
	return n, nil
}

// WriteTo writes the chunks as they arrive, without copying them through an
// intermediate buffer (io.Copy uses it).
func (b *readBody) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if err := b.fill(); err != nil {
			if err == io.EOF {
				return total, nil
			}
			return total, err
		}
		n, err := w.Write(b.cur)
		total += int64(n)
		b.cur = b.cur[n:]
		if err != nil {
			return total, err
		}
	}
}

// Close abandons what is left of the range.
func (b *readBody) Close() error {
	if b.err == nil {
		b.err = errors.New("storage read: body closed")
	}
	b.cur = nil
	b.cancel()
	return nil
}

func (c *client) Delete(ctx context.Context, req *DeleteRequest) (*DeleteResponse, error) {
	if req == nil {
		req = &DeleteRequest{}
	}
	for _, k := range req.Keys {
		if err := ValidKey(k); err != nil {
			return nil, &StorageError{Op: OpDelete, Key: k, Err: err}
		}
	}
	keys := req.Keys
	for first := true; first || len(keys) > 0; first = false {
		n := min(len(keys), deleteBatch)
		if _, err := c.c.Delete(ctx, &pb.DeleteRequest{Keys: keys[:n]}); err != nil {
			return nil, fromStatus(ctx, OpDelete, "", err)
		}
		keys = keys[n:]
	}
	return &DeleteResponse{}, nil
}

func (c *client) List(ctx context.Context, req *ListRequest) (*ListResponse, error) {
	if req == nil {
		req = &ListRequest{}
	}
	if err := ValidPrefix(req.Prefix); err != nil {
		return nil, &StorageError{Op: OpList, Key: req.Prefix, Err: err}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.c.List(ctx, &pb.ListRequest{Prefix: req.Prefix})
	if err != nil {
		return nil, fromStatus(ctx, OpList, req.Prefix, err)
	}
	out := &ListResponse{}
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fromStatus(ctx, OpList, req.Prefix, err)
		}
		for _, o := range m.GetObjects() {
			out.Objects = append(out.Objects, ObjectInfo{Key: o.GetKey(), Size: o.GetSize()})
		}
	}
}
