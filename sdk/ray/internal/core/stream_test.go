package core

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// testStream returns the stream of a generator call with bound that was
// never sent (items are fed to it directly).
func testStream(t *testing.T, bound int32) (*CoreWorker, *Stream) {
	t.Helper()
	cw := newTestWorker(t)
	cw.log = hclog.NewNullLogger()
	tid := cw.idgen.Next()
	retID := ids.ObjectIDFor(tid, 1)
	rec := &taskRecord{spec: &pb.TaskSpec{TaskId: tid.Bytes(), ReturnId: retID.Bytes(), Function: "gen", Streaming: true, Backpressure: bound}, retID: retID}
	rec.stream = newStream(cw, rec)
	t.Cleanup(rec.stream.Close)
	return cw, rec.stream
}

func itemRet(st *Stream, i int64) *pb.ReturnObject {
	id := ItemID(st.ID(), i)
	return &pb.ReturnObject{ObjectId: id.Bytes(), Metadata: codec.FormatMsgpack.Meta(), Data: []byte{byte(i)}, Size: 1}
}

// drain takes every item, then the end: the items' first data bytes and
// the error that ended the stream (nil for io.EOF).
func drain(t *testing.T, cw *CoreWorker, st *Stream) ([]byte, error) {
	t.Helper()
	ctx := context.Background()
	var got []byte
	for {
		h, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			if _, again := st.Next(ctx); !errors.Is(again, io.EOF) {
				t.Fatalf("Next after the stream's error: %v, want io.EOF", again)
			}
			return got, err
		}
		ret, err := cw.objects.result(h.ID)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ret.Data[0])
	}
}

func TestStreamItems(t *testing.T) {
	remote := func(msg string) *pb.ReturnObject {
		return errorReturn(ids.NilObject, &RemoteError{Function: "gen", Message: msg})
	}
	tests := []struct {
		name    string
		bound   int32
		feed    []int64 // item indexes, in the order they come
		total   int64
		end     *pb.ReturnObject // the final reply's ret (nil: success)
		want    string
		wantErr string
	}{
		{"in order", 4, []int64{0, 1, 2}, 3, nil, "\x00\x01\x02", ""},
		{"a retry's repeats are dropped", 4, []int64{0, 1, 0, 1, 2}, 3, nil, "\x00\x01\x02", ""},
		{"error after the items", 4, []int64{0, 1}, 2, remote("item 2 is broken"), "\x00\x01", "item 2 is broken"},
		{"items lost on the way", 4, []int64{0, 1}, 3, nil, "\x00\x01", "made 3 items, 2 reached the caller"},
		{"a gap breaks the stream", 4, []int64{0, 2}, 3, nil, "\x00", "sent item 2 after item 0"},
		{"a producer over its bound is cut off", 1, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, 20, nil,
			"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11", "over its bound of 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cw, st := testStream(t, tt.bound)
			for _, i := range tt.feed {
				st.item(i, itemRet(st, i))
			}
			st.finish(tt.total, tt.end, nil)
			got, err := drain(t, cw, st)
			if string(got) != tt.want {
				t.Errorf("items %q, want %q", got, tt.want)
			}
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("end %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestStreamCloseReleasesItems: Close drops the items not taken (their
// objects go) and keeps those taken; Next then fails with ErrStreamClosed.
func TestStreamCloseReleasesItems(t *testing.T) {
	cw, st := testStream(t, 8)
	for i := range int64(3) {
		st.item(i, itemRet(st, i))
	}
	st.finish(3, nil, nil)
	taken, err := st.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := st.Next(context.Background()); !errors.Is(err, ErrStreamClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if cw.objects.lookup(taken.ID) == nil {
		t.Error("the item taken before Close was freed")
	}
	for i := range int64(2) {
		if id := ItemID(st.ID(), i+1); cw.objects.lookup(id) != nil {
			t.Errorf("item %d, not taken, outlived Close", i+1)
		}
	}
	// An item a late attempt sends after Close is not kept.
	st.item(3, itemRet(st, 3))
	if cw.objects.lookup(ItemID(st.ID(), 3)) != nil {
		t.Error("an item sent after Close was kept")
	}
}

// TestStreamNextHonoursContext: Next waits for an item no longer than its
// context.
func TestStreamNextHonoursContext(t *testing.T) {
	_, st := testStream(t, 8)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := st.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with an ended context: %v", err)
	}
}
