package collective

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/transport"
)

// TestMemConn: bytes written to one end are read at the other, in both
// directions, however the reads split them; a reader can reduce the
// writer's bytes in place; writing nothing does not block; deadlines and
// Close unblock pending calls on both ends with the errors net.Conn users
// expect.
func TestMemConn(t *testing.T) {
	a, b := memPipe()
	defer a.Close()
	defer b.Close()

	t.Run("both directions", func(t *testing.T) {
		for _, dir := range []struct{ w, r *memConn }{{a, b}, {b, a}} {
			msg := bytes.Repeat([]byte("goray"), 1000)
			go func() { _, _ = dir.w.Write(msg) }()
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(dir.r, got[:7]); err != nil { // a short read first
				t.Fatal(err)
			}
			if _, err := io.ReadFull(dir.r, got[7:]); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, msg) {
				t.Fatal("bytes differ")
			}
		}
	})
	t.Run("empty write", func(t *testing.T) {
		if n, err := a.Write(nil); n != 0 || err != nil {
			t.Fatalf("Write(nil) = %d, %v", n, err)
		}
	})
	t.Run("reduce in place", func(t *testing.T) {
		red, err := reducer(transport.Int32, transport.ReduceSum)
		if err != nil {
			t.Fatal(err)
		}
		src := []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}
		dst := []byte{10, 0, 0, 0, 20, 0, 0, 0, 30, 0, 0, 0}
		go func() { _, _ = a.Write(src[:6]); _, _ = a.Write(src[6:]) }() // splits an element
		if err := readReduce(b, dst, 4, make([]byte, 4), red); err != nil {
			t.Fatal(err)
		}
		if want := []byte{11, 0, 0, 0, 22, 0, 0, 0, 33, 0, 0, 0}; !bytes.Equal(dst, want) {
			t.Fatalf("reduced %v, want %v", dst, want)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		_ = b.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := b.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read past the deadline: %v", err)
		}
		_ = b.SetReadDeadline(time.Time{})
		_ = a.SetWriteDeadline(time.Unix(1, 0))
		if _, err := a.Write([]byte{1}); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Write past the deadline: %v", err)
		}
		_ = a.SetWriteDeadline(time.Time{})
	})
	t.Run("close", func(t *testing.T) {
		read := make(chan error, 1)
		go func() { _, err := b.Read(make([]byte, 1)); read <- err }()
		write := make(chan error, 1)
		go func() { _, err := b.Write([]byte{1}); write <- err }() // nobody reads a
		_ = a.Close()
		if err := <-read; err != io.EOF {
			t.Errorf("Read of the open end after the other closed: %v, want EOF", err)
		}
		if err := <-write; err != io.ErrClosedPipe {
			t.Errorf("Write of the open end after the other closed: %v, want ErrClosedPipe", err)
		}
		if _, err := a.Read(make([]byte, 1)); err != io.ErrClosedPipe {
			t.Errorf("Read of the closed end: %v, want ErrClosedPipe", err)
		}
	})
}

// TestOtherWireVersionRefused: a connection saying another protocol
// version is refused with a reply naming both versions, whatever it is
// for (an instance of an older release joining a group).
func TestOtherWireVersionRefused(t *testing.T) {
	tr := New()
	defer tr.Close()
	for _, v := range []int{wireVersion - 1, wireVersion + 1} {
		a, b := memPipe()
		done := make(chan struct{})
		go func() { defer close(done); tr.dispatch(b) }()
		if err := writeFrame(a, hello{V: v, Type: helloJoin, Group: "g"}); err != nil {
			t.Fatal(err)
		}
		var r reply
		if err := readFrame(a, &r); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("protocol version %d, want %d", v, wireVersion)
		if r.Kind != replyBad || r.Error != want {
			t.Fatalf("version %d: reply %+v, want %s %q", v, r, replyBad, want)
		}
		<-done
		a.Close()
	}
}
