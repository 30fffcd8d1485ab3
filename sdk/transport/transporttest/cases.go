package transporttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

var shapes = [][]int64{{}, {1}, {7}, {3, 5}, {2, 3, 4}, {1, 1, 1, 1}, {5, 1, 3}, {129}}

func testInfo(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	a, b := e.info, mustInfo(e, e.dst)
	if a.Name == "" {
		e.t.Error("Info: empty backend name")
	}
	if *a != *b {
		e.t.Errorf("Info differs between source (%+v) and destination (%+v)", *a, *b)
	}
	if again := mustInfo(e, e.src); *again != *a {
		e.t.Errorf("Info changed between calls: %+v then %+v", *a, *again)
	}
	if _, err := e.src.ActorHasTransport(ctx, &transport.ActorHasTransportRequest{ActorID: "a1"}); err != nil {
		e.t.Errorf("ActorHasTransport: %v", err)
	}
	if !a.OneSided {
		return
	}
	// One-sided: Send is never used and says so.
	id := newObjectID()
	tn := e.tensor(transport.Float32, 1, 4)
	meta, err := e.extract(ctx, id, []transport.Tensor{tn}, false)
	if err != nil {
		e.t.Fatalf("ExtractMetadata: %v", err)
	}
	_, err = e.src.Send(ctx, &transport.SendRequest{ObjectID: id, Tensors: meta.Tensors, TransportData: meta.TransportData})
	wantErr(e.t, "Send on a one-sided transport", err, transport.ErrNotSupported)
}

func mustInfo(e *env, tr transport.Transport) *transport.InfoResponse {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	r, err := tr.Info(ctx, nil)
	if err != nil {
		e.t.Fatalf("Info: %v", err)
	}
	return r
}

func testRoundTrip(e *env) {
	for di, dt := range transport.DTypes {
		e.t.Run(string(dt), func(t *testing.T) {
			sub := e.with(t)
			ctx, cancel := sub.ctx()
			defer cancel()
			var tensors []transport.Tensor
			for si, s := range shapes {
				tensors = append(tensors, sub.tensor(dt, uint64(100*di+si), s...))
			}
			sub.roundTrip(ctx, newObjectID(), tensors, nil, false)
		})
	}
	e.t.Run("packed", func(t *testing.T) {
		sub := e.with(t)
		ctx, cancel := sub.ctx()
		defer cancel()
		var metas []transport.TensorMeta
		for i, dt := range transport.DTypes {
			metas = append(metas, transport.TensorMeta{DType: dt, Shape: shapes[i%len(shapes)], Device: transport.CPU})
		}
		sub.roundTrip(ctx, newObjectID(), sub.packed(metas, 7), nil, false)
	})
	e.t.Run("no-tensors", func(t *testing.T) {
		sub := e.with(t)
		ctx, cancel := sub.ctx()
		defer cancel()
		sub.roundTrip(ctx, newObjectID(), []transport.Tensor{}, nil, false)
	})
}

func testZeroLength(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	tensors := []transport.Tensor{
		e.tensor(transport.Float32, 1, 0),
		e.tensor(transport.Int64, 2, 3, 0),
		e.tensor(transport.Bool, 3, 0, 5, 2),
		// A zero-length tensor need not name a segment at all.
		{DType: transport.BFloat16, Shape: []int64{0}, Device: transport.CPU},
		e.tensor(transport.Uint8, 4, 5), // mixed with a non-empty one
	}
	e.roundTrip(ctx, newObjectID(), tensors, nil, false)
	// And into targets.
	targets := []transport.Tensor{
		e.tensor(transport.Float32, 0, 0),
		e.tensor(transport.Int64, 0, 3, 0),
		e.tensor(transport.Bool, 0, 0, 5, 2),
		{DType: transport.BFloat16, Shape: []int64{0}, Device: transport.CPU},
		e.tensor(transport.Uint8, 0, 5),
	}
	e.roundTrip(ctx, newObjectID(), tensors, targets, false)
}

func testLarge(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	n := e.cfg.LargeSize / 4
	tn := e.tensor(transport.Float32, 99, n)
	e.roundTrip(ctx, newObjectID(), []transport.Tensor{tn}, nil, true)
}

func testTargets(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	metas := []transport.TensorMeta{
		{DType: transport.Float64, Shape: []int64{4, 4}, Device: transport.CPU},
		{DType: transport.Int8, Shape: []int64{33}, Device: transport.CPU},
		{DType: transport.Float16, Shape: []int64{2, 3, 5}, Device: transport.CPU},
	}
	src := e.packed(metas, 11)
	targets := e.packed(metas, 0) // one caller segment, several offsets
	r := e.roundTrip(ctx, newObjectID(), src, targets, false)
	if len(r.Allocated) != 0 {
		e.t.Errorf("receive into targets allocated segments %v", r.Allocated)
	}
	for i := range r.Tensors {
		if r.Tensors[i].Buffer != targets[i].Buffer {
			e.t.Errorf("tensor %d: received into %+v, want the target %+v", i, r.Tensors[i].Buffer, targets[i].Buffer)
		}
	}
	// The targets hold a copy: changing the source now must not show.
	before := e.read(targets[0])
	e.fill(src[0], 12345)
	if after := e.read(targets[0]); !slices.Equal(before, after) {
		e.t.Error("target changed when the source was rewritten after the receive: it aliases the source")
	}
	// Targets with separate segments, one per tensor.
	sep := []transport.Tensor{
		e.tensor(transport.Float64, 0, 4, 4),
		e.tensor(transport.Int8, 0, 33),
		e.tensor(transport.Float16, 0, 2, 3, 5),
	}
	e.roundTrip(ctx, newObjectID(), src, sep, false)
}

func testGarbageCollect(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()

	e.t.Run("owned", func(t *testing.T) {
		sub := e.with(t)
		id := newObjectID()
		tensors := []transport.Tensor{sub.tensor(transport.Int32, 1, 10), sub.tensor(transport.Uint8, 2, 3, 3)}
		sub.roundTrip(ctx, id, tensors, nil, true)
		meta := sub.meta(id)
		if _, err := sub.src.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: id, TransportData: meta.TransportData}); err != nil {
			t.Fatalf("GarbageCollect: %v", err)
		}
		for _, tn := range tensors {
			if shmem.Exists(tn.Buffer.Segment) {
				t.Errorf("owned segment %s still exists after GarbageCollect", tn.Buffer.Segment)
			}
		}
		sub.wantGone(ctx, id, meta)
		if e.cfg.Inspector != nil {
			if err := e.cfg.Inspector(ctx, id); err != nil {
				t.Errorf("inspector after GarbageCollect: %v", err)
			}
		}
		if _, err := sub.src.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: id}); err != nil {
			t.Errorf("second GarbageCollect of the same object: %v (collecting an unknown object is not an error)", err)
		}
	})

	e.t.Run("shared-segment", func(t *testing.T) {
		sub := e.with(t)
		metas := []transport.TensorMeta{
			{DType: transport.Float32, Shape: []int64{8}, Device: transport.CPU},
			{DType: transport.Int16, Shape: []int64{8}, Device: transport.CPU},
		}
		ts := sub.packed(metas, 5)
		a, b := newObjectID(), newObjectID()
		sub.roundTrip(ctx, a, ts[:1], nil, true)
		sub.roundTrip(ctx, b, ts[1:], nil, true)
		if _, err := sub.src.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: a}); err != nil {
			t.Fatalf("GarbageCollect: %v", err)
		}
		if !shmem.Exists(ts[0].Buffer.Segment) {
			t.Fatalf("segment %s unlinked while object %s still references it", ts[0].Buffer.Segment, b)
		}
		// b is still fully usable.
		meta := sub.meta(b)
		r, err := sub.transfer(ctx, b, meta, nil)
		if err != nil {
			t.Fatalf("transfer of %s after collecting %s: %v", b, a, err)
		}
		sub.check(r, ts[1:], [][]byte{sub.read(ts[1])})
		if _, err := sub.src.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: b}); err != nil {
			t.Fatalf("GarbageCollect: %v", err)
		}
		if shmem.Exists(ts[0].Buffer.Segment) {
			t.Errorf("segment %s still exists after its last object was collected", ts[0].Buffer.Segment)
		}
	})

	e.t.Run("not-owned", func(t *testing.T) {
		sub := e.with(t)
		id := newObjectID()
		tn := sub.tensor(transport.Float64, 3, 6)
		want := sub.read(tn)
		sub.roundTrip(ctx, id, []transport.Tensor{tn}, nil, false)
		meta := sub.meta(id)
		if _, err := sub.src.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: id}); err != nil {
			t.Fatalf("GarbageCollect: %v", err)
		}
		if !shmem.Exists(tn.Buffer.Segment) {
			t.Fatalf("GarbageCollect unlinked segment %s it did not own", tn.Buffer.Segment)
		}
		if got := sub.read(tn); !slices.Equal(got, want) {
			t.Error("GarbageCollect changed the bytes of a segment it did not own")
		}
		sub.wantGone(ctx, id, meta)
	})
}

// wantGone checks that a collected object can no longer be transferred.
func (e *env) wantGone(ctx context.Context, id string, meta *transport.ExtractMetadataResponse) {
	e.t.Helper()
	if e.info.OneSided {
		_, err := e.dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: id, Tensors: meta.Tensors, TransportData: meta.TransportData})
		wantErr(e.t, "Receive after GarbageCollect", err, transport.ErrBadMetadata)
		return
	}
	_, err := e.src.Send(ctx, &transport.SendRequest{ObjectID: id, Tensors: meta.Tensors, TransportData: meta.TransportData})
	wantErr(e.t, "Send after GarbageCollect", err, transport.ErrBadMetadata)
}

func testAbort(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	if !e.info.CanAbort {
		_, err := e.dst.Abort(ctx, &transport.AbortRequest{ObjectID: newObjectID(), Reason: "test"})
		wantErr(e.t, "Abort on a transport that cannot abort", err, transport.ErrNotSupported)
		return
	}
	id := newObjectID()
	var req *transport.ReceiveRequest
	if e.info.OneSided {
		// The object does not exist yet: the receive waits for it.
		req = &transport.ReceiveRequest{ObjectID: id}
	} else {
		// The object exists but nobody sends it.
		tn := e.tensor(transport.Float32, 1, 16)
		meta, err := e.extract(ctx, id, []transport.Tensor{tn}, false)
		if err != nil {
			e.t.Fatalf("ExtractMetadata: %v", err)
		}
		req = &transport.ReceiveRequest{ObjectID: id, Tensors: meta.Tensors, TransportData: meta.TransportData}
	}
	done := e.pendingReceive(ctx, req)
	if _, err := e.dst.Abort(ctx, &transport.AbortRequest{ObjectID: id, Reason: "suite abort"}); err != nil {
		e.t.Fatalf("Abort: %v", err)
	}
	wantErr(e.t, "pending Receive after Abort", e.await(done, "aborted Receive"), transport.ErrAborted)
	_, err := e.dst.Receive(ctx, req)
	wantErr(e.t, "Receive of an aborted object", err, transport.ErrAborted)

	// Other objects are unaffected.
	e.roundTrip(ctx, newObjectID(), []transport.Tensor{e.tensor(transport.Int8, 2, 9)}, nil, false)

	if e.info.OneSided {
		return
	}
	// Two-sided: a Send nobody receives is unblocked by Abort on the source.
	id2 := newObjectID()
	tn := e.tensor(transport.Int32, 3, 5)
	meta, err := e.extract(ctx, id2, []transport.Tensor{tn}, false)
	if err != nil {
		e.t.Fatalf("ExtractMetadata: %v", err)
	}
	sent := make(chan error, 1)
	go func() {
		_, err := e.src.Send(ctx, &transport.SendRequest{ObjectID: id2, Tensors: meta.Tensors, TransportData: meta.TransportData})
		sent <- err
	}()
	if _, err := e.src.Abort(ctx, &transport.AbortRequest{ObjectID: id2, Reason: "suite abort"}); err != nil {
		e.t.Fatalf("Abort: %v", err)
	}
	wantErr(e.t, "pending Send after Abort", e.await(sent, "aborted Send"), transport.ErrAborted)
}

func testReceiveFirst(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	id := newObjectID()
	tensors := []transport.Tensor{e.tensor(transport.Float32, 21, 3, 3), e.tensor(transport.Int64, 22, 4)}
	want := [][]byte{e.read(tensors[0]), e.read(tensors[1])}
	type result struct {
		r   *transport.ReceiveResponse
		err error
	}
	if e.info.OneSided {
		// The destination asks before the source has produced the object.
		res := make(chan result, 1)
		go func() {
			r, err := e.dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: id})
			res <- result{r, err}
		}()
		if _, err := e.extract(ctx, id, tensors, false); err != nil {
			e.t.Fatalf("ExtractMetadata: %v", err)
		}
		var got result
		select {
		case got = <-res:
		case <-ctx.Done():
			e.t.Fatalf("Receive waiting for object %s did not return after it was extracted", id)
		}
		if got.err != nil {
			e.t.Fatalf("Receive: %v", got.err)
		}
		for _, s := range got.r.Allocated {
			e.track(s)
		}
		e.check(got.r, tensors, want)
		return
	}
	// Two-sided: Receive is posted before Send.
	meta, err := e.extract(ctx, id, tensors, false)
	if err != nil {
		e.t.Fatalf("ExtractMetadata: %v", err)
	}
	res := make(chan result, 1)
	go func() {
		r, err := e.dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: id, Tensors: meta.Tensors, TransportData: meta.TransportData})
		res <- result{r, err}
	}()
	select {
	case got := <-res:
		e.t.Fatalf("Receive returned before Send (err=%v)", got.err)
	case <-time.After(e.cfg.BlockCheck):
	}
	if _, err := e.src.Send(ctx, &transport.SendRequest{ObjectID: id, Tensors: meta.Tensors, TransportData: meta.TransportData}); err != nil {
		e.t.Fatalf("Send: %v", err)
	}
	got := <-res
	if got.err != nil {
		e.t.Fatalf("Receive: %v", got.err)
	}
	for _, s := range got.r.Allocated {
		e.track(s)
	}
	e.check(got.r, tensors, want)
}

func testCancel(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	pendingReq := func() *transport.ReceiveRequest {
		id := newObjectID()
		if e.info.OneSided {
			return &transport.ReceiveRequest{ObjectID: id}
		}
		tn := e.tensor(transport.Float32, 1, 16)
		meta, err := e.extract(ctx, id, []transport.Tensor{tn}, false)
		if err != nil {
			e.t.Fatalf("ExtractMetadata: %v", err)
		}
		return &transport.ReceiveRequest{ObjectID: id, Tensors: meta.Tensors, TransportData: meta.TransportData}
	}

	cctx, ccancel := context.WithCancel(ctx)
	done := e.pendingReceive(cctx, pendingReq())
	ccancel()
	wantErr(e.t, "Receive after its context was cancelled", e.await(done, "cancelled Receive"), context.Canceled)

	dctx, dcancel := context.WithTimeout(ctx, 2*e.cfg.BlockCheck)
	defer dcancel()
	req := pendingReq()
	dres := make(chan error, 1)
	go func() {
		_, err := e.dst.Receive(dctx, req)
		dres <- err
	}()
	err := e.await(dres, "Receive with a deadline")
	wantErr(e.t, "Receive past its deadline", err, transport.ErrTimeout)
	wantErr(e.t, "Receive past its deadline", err, context.DeadlineExceeded)

	// The transport still works.
	e.roundTrip(ctx, newObjectID(), []transport.Tensor{e.tensor(transport.Uint8, 5, 17)}, nil, false)
}

func testConcurrent(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	n := e.cfg.Concurrency
	type job struct {
		id      string
		tensors []transport.Tensor
		targets []transport.Tensor
		want    [][]byte
	}
	jobs := make([]job, n)
	for i := range jobs {
		dt := transport.DTypes[i%len(transport.DTypes)]
		shape := []int64{int64(1 + i), 3}
		j := job{id: newObjectID(), tensors: []transport.Tensor{e.tensor(dt, uint64(i), shape...), e.tensor(transport.Int32, uint64(1000+i), 64)}}
		if i%2 == 1 {
			j.targets = []transport.Tensor{e.tensor(dt, 0, shape...), e.tensor(transport.Int32, 0, 64)}
		}
		j.want = [][]byte{e.read(j.tensors[0]), e.read(j.tensors[1])}
		jobs[i] = j
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			meta, err := e.extract(ctx, j.id, j.tensors, true)
			if err != nil {
				errs <- fmt.Errorf("object %s: ExtractMetadata: %w", j.id, err)
				return
			}
			r, err := e.transfer(ctx, j.id, meta, j.targets)
			if err != nil {
				errs <- fmt.Errorf("object %s: transfer: %w", j.id, err)
				return
			}
			for k, got := range r.Tensors {
				b, err := got.Bytes(ctx)
				if err != nil {
					errs <- fmt.Errorf("object %s: map tensor %d: %w", j.id, k, err)
					return
				}
				same := slices.Equal(b, j.want[k])
				got.Release()
				if !same {
					errs <- fmt.Errorf("object %s: tensor %d: bytes differ", j.id, k)
					return
				}
			}
			if _, err := e.src.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: j.id, TransportData: meta.TransportData}); err != nil {
				errs <- fmt.Errorf("object %s: GarbageCollect: %w", j.id, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Error(err)
	}
}

func testBadMetadata(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	good := e.tensor(transport.Float32, 1, 2, 3)
	goodID := newObjectID()
	meta, err := e.extract(ctx, goodID, []transport.Tensor{good}, false)
	if err != nil {
		e.t.Fatalf("ExtractMetadata: %v", err)
	}
	small := e.segment(16)

	extractCases := []struct {
		name string
		req  *transport.ExtractMetadataRequest
	}{
		{"nil request", nil},
		{"empty object id", &transport.ExtractMetadataRequest{Tensors: []transport.Tensor{good}}},
		{"non-hex object id", &transport.ExtractMetadataRequest{ObjectID: "../../etc/passwd", Tensors: []transport.Tensor{good}}},
		{"unknown dtype", &transport.ExtractMetadataRequest{ObjectID: newObjectID(), Tensors: []transport.Tensor{
			{DType: "complex512", Shape: []int64{2}, Buffer: transport.Buffer{Segment: small, Length: 16}}}}},
		{"negative dimension", &transport.ExtractMetadataRequest{ObjectID: newObjectID(), Tensors: []transport.Tensor{
			{DType: transport.Float32, Shape: []int64{-4}, Buffer: transport.Buffer{Segment: small, Length: 16}}}}},
		{"length does not match shape", &transport.ExtractMetadataRequest{ObjectID: newObjectID(), Tensors: []transport.Tensor{
			{DType: transport.Float32, Shape: []int64{3}, Buffer: transport.Buffer{Segment: small, Length: 16}}}}},
		{"missing segment", &transport.ExtractMetadataRequest{ObjectID: newObjectID(), Tensors: []transport.Tensor{
			{DType: transport.Float32, Shape: []int64{4}, Buffer: transport.Buffer{Segment: shmem.NewName(e.prefix + "missing-"), Length: 16}}}}},
		{"bytes outside segment", &transport.ExtractMetadataRequest{ObjectID: newObjectID(), Tensors: []transport.Tensor{
			{DType: transport.Float32, Shape: []int64{4}, Buffer: transport.Buffer{Segment: small, Offset: 8, Length: 16}}}}},
		{"segment name with a slash", &transport.ExtractMetadataRequest{ObjectID: newObjectID(), Tensors: []transport.Tensor{
			{DType: transport.Float32, Shape: []int64{4}, Buffer: transport.Buffer{Segment: "../" + small, Length: 16}}}}},
		{"already extracted", &transport.ExtractMetadataRequest{ObjectID: goodID, Tensors: []transport.Tensor{good}}},
	}
	for _, tc := range extractCases {
		_, err := e.src.ExtractMetadata(ctx, tc.req)
		wantErr(e.t, "ExtractMetadata with "+tc.name, err, transport.ErrBadMetadata)
	}

	garbage := []byte("\x00\xffnot transport data at all\x13\x37")
	otherMeta := *meta
	otherMeta.Tensors = []transport.TensorMeta{{DType: transport.Float32, Shape: []int64{3, 2}, Device: transport.CPU}}
	receiveCases := []struct {
		name string
		req  *transport.ReceiveRequest
	}{
		{"nil request", nil},
		{"empty object id", &transport.ReceiveRequest{TransportData: meta.TransportData}},
		{"non-hex object id", &transport.ReceiveRequest{ObjectID: "zz", TransportData: meta.TransportData}},
		{"garbage transport data", &transport.ReceiveRequest{ObjectID: goodID, Tensors: meta.Tensors, TransportData: garbage}},
		{"unknown object", &transport.ReceiveRequest{ObjectID: newObjectID(), Tensors: meta.Tensors, TransportData: meta.TransportData}},
		{"wrong shape", &transport.ReceiveRequest{ObjectID: goodID, Tensors: otherMeta.Tensors, TransportData: meta.TransportData}},
		{"wrong dtype", &transport.ReceiveRequest{ObjectID: goodID, TransportData: meta.TransportData,
			Tensors: []transport.TensorMeta{{DType: transport.Int32, Shape: []int64{2, 3}, Device: transport.CPU}}}},
		{"wrong tensor count", &transport.ReceiveRequest{ObjectID: goodID, TransportData: meta.TransportData,
			Tensors: append(slices.Clone(meta.Tensors), meta.Tensors[0])}},
		{"target of the wrong shape", &transport.ReceiveRequest{ObjectID: goodID, Tensors: meta.Tensors, TransportData: meta.TransportData,
			Targets: []transport.Tensor{e.tensor(transport.Float32, 0, 3)}}},
		{"target count mismatch", &transport.ReceiveRequest{ObjectID: goodID, Tensors: meta.Tensors, TransportData: meta.TransportData,
			Targets: []transport.Tensor{e.tensor(transport.Float32, 0, 2, 3), e.tensor(transport.Float32, 0, 2, 3)}}},
		{"target in a missing segment", &transport.ReceiveRequest{ObjectID: goodID, Tensors: meta.Tensors, TransportData: meta.TransportData,
			Targets: []transport.Tensor{{DType: transport.Float32, Shape: []int64{2, 3}, Device: transport.CPU,
				Buffer: transport.Buffer{Segment: shmem.NewName(e.prefix + "missing-"), Length: 24}}}}},
	}
	if len(meta.TransportData) >= 2 {
		receiveCases = append(receiveCases, struct {
			name string
			req  *transport.ReceiveRequest
		}{"truncated transport data", &transport.ReceiveRequest{ObjectID: goodID, Tensors: meta.Tensors, TransportData: meta.TransportData[:len(meta.TransportData)/2]}})
	}
	for _, tc := range receiveCases {
		_, err := e.dst.Receive(ctx, tc.req)
		wantErr(e.t, "Receive with "+tc.name, err, transport.ErrBadMetadata)
		if errors.Is(err, transport.ErrTimeout) {
			e.t.Errorf("Receive with %s waited for its deadline instead of failing at once", tc.name)
		}
	}

	if !e.info.OneSided {
		sendCases := []struct {
			name string
			req  *transport.SendRequest
		}{
			{"nil request", nil},
			{"garbage transport data", &transport.SendRequest{ObjectID: goodID, Tensors: meta.Tensors, TransportData: garbage}},
			{"unknown object", &transport.SendRequest{ObjectID: newObjectID(), Tensors: meta.Tensors, TransportData: meta.TransportData}},
			{"wrong shape", &transport.SendRequest{ObjectID: goodID, Tensors: otherMeta.Tensors, TransportData: meta.TransportData}},
		}
		for _, tc := range sendCases {
			_, err := e.src.Send(ctx, tc.req)
			wantErr(e.t, "Send with "+tc.name, err, transport.ErrBadMetadata)
		}
	}

	_, err = e.src.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: "not hex"})
	wantErr(e.t, "GarbageCollect with a non-hex object id", err, transport.ErrBadMetadata)
	_, err = e.src.GarbageCollect(ctx, nil)
	wantErr(e.t, "GarbageCollect with a nil request", err, transport.ErrBadMetadata)
	if _, err := e.src.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: newObjectID()}); err != nil {
		e.t.Errorf("GarbageCollect of an unknown object: %v (want no error)", err)
	}

	// Nothing broke: the good object still transfers.
	r, err := e.transfer(ctx, goodID, meta, nil)
	if err != nil {
		e.t.Fatalf("transfer after bad requests: %v", err)
	}
	e.check(r, []transport.Tensor{good}, [][]byte{e.read(good)})
}
