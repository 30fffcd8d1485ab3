// Package connlimittest has what tests of connection limits do as an
// attacker would: a gRPC call whose headers are huge, sent over a raw
// HTTP/2 connection (a real gRPC client refuses to send headers over the
// server's advertised limit), and floods of idle and slow connections.
package connlimittest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Outcome is how a server answered a call with huge headers.
type Outcome string

// Outcomes of HugeHeaders.
const (
	// Reset: the server reset the stream (RST_STREAM) or the connection
	// (GOAWAY, or closed it): the transport refused the headers.
	Reset Outcome = "reset"
	// Answered: the server read the headers whole and answered the call
	// (with a gRPC status, Unauthenticated say).
	Answered Outcome = "answered"
)

// EncodeHeaders returns the HPACK block of a gRPC call to method (e.g.
// "/pkg.Service/Method") with about size bytes of extra metadata, in
// values of 4 KiB (each under any sane string limit, so a server must read
// them all to reach the end of the list).
func EncodeHeaders(method string, size int) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: method}, {Name: ":authority", Value: "goray"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		_ = enc.WriteField(f)
	}
	val := string(bytes.Repeat([]byte("x"), 4<<10))
	for i := 0; buf.Len() < size; i++ {
		_ = enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-pad-%d", i), Value: val, Sensitive: true})
	}
	return buf.Bytes()
}

// HugeHeaders sends one call with the header block block (EncodeHeaders)
// on conn, a fresh connection to a gRPC server without TLS, and returns
// how the server answered. It honours ctx by closing conn when ctx ends;
// the caller closes conn.
func HugeHeaders(ctx context.Context, conn net.Conn, block []byte) (Outcome, error) {
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		return "", err
	}
	// Two framers, one writing the call and one reading the answers
	// (and acknowledging settings); a framer writes each frame with one
	// Write, which the lock keeps whole.
	w := &lockedWriter{w: conn}
	fw := http2.NewFramer(w, nil)
	fr := http2.NewFramer(w, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	if err := fw.WriteSettings(); err != nil {
		return "", err
	}
	// Write while reading: the server may reset the stream or the
	// connection before it has read everything.
	werr := make(chan error, 1)
	go func() {
		const chunk = 16 << 10 // the default SETTINGS_MAX_FRAME_SIZE
		first := block[:min(chunk, len(block))]
		err := fw.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndHeaders: len(first) == len(block)})
		for rest := block[len(first):]; err == nil && len(rest) > 0; {
			n := min(chunk, len(rest))
			err = fw.WriteContinuation(1, n == len(rest), rest[:n])
			rest = rest[n:]
		}
		if err == nil {
			err = fw.WriteData(1, true, []byte{0, 0, 0, 0, 0})
		}
		werr <- err
	}()
	out, err := readAnswer(fr)
	// The writer may be blocked on a connection the server no longer
	// reads.
	_ = conn.Close()
	wErr := <-werr
	if err != nil && ctx.Err() != nil {
		return "", ctx.Err()
	}
	if out == "" && wErr != nil && ctx.Err() == nil {
		// The server closed the connection while headers were being
		// written.
		return Reset, nil
	}
	return out, err
}

// lockedWriter serialises the writes of two framers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// readAnswer reads frames until the server answers stream 1 or ends the
// connection.
func readAnswer(fr *http2.Framer) (Outcome, error) {
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
				return Reset, nil
			}
			return "", err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					return Reset, nil
				}
			}
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			return Reset, nil
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 {
				return Answered, nil
			}
		}
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// Flood holds connections to addresses: idle ones (nothing sent) and slow
// ones (a byte every SlowEvery), reopening each one the server closes, until
// Stop. It holds at most its count of connections at any time.
type Flood struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	opened   int // connections opened, ever
	closedBy int // connections the server closed or refused
	held     int // of those, closed after SlowEvery or more
}

// SlowEvery is the pace of a slow connection's bytes.
const SlowEvery = time.Second

// StartFlood opens idle connections and slow ones to each of addrs and
// keeps them open (reopening what the server closes, at most once per
// reopenPause per connection) until Stop or ctx ends.
func StartFlood(ctx context.Context, addrs []string, idle, slow int) *Flood {
	ctx, cancel := context.WithCancel(ctx)
	f := &Flood{cancel: cancel}
	for _, a := range addrs {
		for i := range idle + slow {
			f.wg.Add(1)
			go f.hold(ctx, a, i >= idle)
		}
	}
	return f
}

// reopenPause spaces a flood connection's reconnections, so that a server
// refusing at once is not dialled in a tight loop on a shared machine.
const reopenPause = 500 * time.Millisecond

func (f *Flood) hold(ctx context.Context, addr string, slow bool) {
	defer f.wg.Done()
	var d net.Dialer
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			f.mu.Lock()
			f.opened++
			f.mu.Unlock()
			f.keep(ctx, c, slow)
			_ = c.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(reopenPause):
		}
	}
}

// keep holds c until ctx ends or the server closes it.
func (f *Flood) keep(ctx context.Context, c net.Conn, slow bool) {
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	done := make(chan struct{})
	var wg sync.WaitGroup
	if slow {
		// A byte a second: the server sees a peer that is still talking.
		wg.Go(func() {
			t := time.NewTicker(SlowEvery)
			defer t.Stop()
			for {
				if _, err := c.Write([]byte{0}); err != nil {
					return
				}
				select {
				case <-done:
					return
				case <-t.C:
				}
			}
		})
	}
	// The server closing the connection ends the read.
	start := time.Now()
	_, _ = io.Copy(io.Discard, c)
	lived := time.Since(start)
	close(done)
	wg.Wait()
	if ctx.Err() == nil {
		f.mu.Lock()
		f.closedBy++
		if lived >= SlowEvery {
			f.held++
		}
		f.mu.Unlock()
	}
}

// Counts returns how many connections the flood opened, how many of them
// the server closed, and how many of those it closed after holding them
// for SlowEvery or more (at a deadline, rather than refusing them).
func (f *Flood) Counts() (opened, closedByServer, heldThenClosed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opened, f.closedBy, f.held
}

// Stop closes every connection and waits for the flood's goroutines.
func (f *Flood) Stop() {
	f.cancel()
	f.wg.Wait()
}
