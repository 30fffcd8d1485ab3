package collective

// In-process connections between members hosted by the same instance.

import (
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// memConn is one end of an in-process, synchronous, full-duplex connection
// (like net.Pipe): a Write blocks until the other end has consumed every
// byte, so no byte is buffered or copied on the way. Besides Read, the
// reading end can work on the writer's bytes in place (readFunc): a ring
// step reduces the previous rank's chunk straight from its tensor into
// its own. Connections between two members of one instance use it instead
// of TCP loopback (Config.InProcess): that saves the two kernel copies and
// the system calls per byte that dominate the ring on one machine.
type memConn struct {
	wrMu sync.Mutex // serializes Writes

	// Write hands its bytes to the reader through wrTx and learns how many
	// were consumed through wrRx; rdRx and rdTx are the reader's ends.
	rdRx <-chan []byte
	rdTx chan<- int
	wrTx chan<- []byte
	wrRx <-chan int

	once       sync.Once // protects closing localDone
	localDone  chan struct{}
	remoteDone <-chan struct{}

	readDeadline  *memDeadline
	writeDeadline *memDeadline
}

// memPipe returns the two ends of an in-process connection.
func memPipe() (*memConn, *memConn) {
	cb1, cb2 := make(chan []byte), make(chan []byte)
	cn1, cn2 := make(chan int), make(chan int)
	done1, done2 := make(chan struct{}), make(chan struct{})
	a := &memConn{rdRx: cb1, rdTx: cn1, wrTx: cb2, wrRx: cn2,
		localDone: done1, remoteDone: done2, readDeadline: newMemDeadline(), writeDeadline: newMemDeadline()}
	b := &memConn{rdRx: cb2, rdTx: cn2, wrTx: cb1, wrRx: cn1,
		localDone: done2, remoteDone: done1, readDeadline: newMemDeadline(), writeDeadline: newMemDeadline()}
	return a, b
}

// memAddr is the address of both ends of a memConn.
type memAddr struct{}

func (memAddr) Network() string { return "inproc" }
func (memAddr) String() string  { return "inproc" }

func (c *memConn) LocalAddr() net.Addr  { return memAddr{} }
func (c *memConn) RemoteAddr() net.Addr { return memAddr{} }

// Read implements net.Conn.
func (c *memConn) Read(b []byte) (int, error) {
	return c.readFunc(len(b), func(src []byte) int { return copy(b, src) })
}

// readFunc waits for the writer's bytes and calls fn with up to max of
// them (the writer's own memory: fn must not keep it); fn returns how many
// it consumed. Errors are those of Read.
func (c *memConn) readFunc(max int, fn func([]byte) int) (int, error) {
	n, err := c.read(max, fn)
	if err != nil && err != io.EOF && err != io.ErrClosedPipe {
		err = &net.OpError{Op: "read", Net: "inproc", Err: err}
	}
	return n, err
}

func (c *memConn) read(max int, fn func([]byte) int) (int, error) {
	switch {
	case isClosed(c.localDone):
		return 0, io.ErrClosedPipe
	case isClosed(c.remoteDone):
		return 0, io.EOF
	case isClosed(c.readDeadline.wait()):
		return 0, os.ErrDeadlineExceeded
	}
	select {
	case bw := <-c.rdRx:
		n := fn(bw[:min(len(bw), max)])
		c.rdTx <- n
		return n, nil
	case <-c.localDone:
		return 0, io.ErrClosedPipe
	case <-c.remoteDone:
		return 0, io.EOF
	case <-c.readDeadline.wait():
		return 0, os.ErrDeadlineExceeded
	}
}

// Write implements net.Conn.
func (c *memConn) Write(b []byte) (int, error) {
	n, err := c.write(b)
	if err != nil && err != io.ErrClosedPipe {
		err = &net.OpError{Op: "write", Net: "inproc", Err: err}
	}
	return n, err
}

func (c *memConn) write(b []byte) (n int, err error) {
	switch {
	case isClosed(c.localDone), isClosed(c.remoteDone):
		return 0, io.ErrClosedPipe
	case isClosed(c.writeDeadline.wait()):
		return 0, os.ErrDeadlineExceeded
	}
	c.wrMu.Lock()
	defer c.wrMu.Unlock()
	// Unlike net.Pipe, writing nothing does not wait for a Read: readers
	// (io.ReadFull of nothing) never make one.
	for len(b) > 0 {
		select {
		case c.wrTx <- b:
			nw := <-c.wrRx
			b = b[nw:]
			n += nw
		case <-c.localDone:
			return n, io.ErrClosedPipe
		case <-c.remoteDone:
			return n, io.ErrClosedPipe
		case <-c.writeDeadline.wait():
			return n, os.ErrDeadlineExceeded
		}
	}
	return n, nil
}

// SetDeadline implements net.Conn.
func (c *memConn) SetDeadline(t time.Time) error {
	if isClosed(c.localDone) || isClosed(c.remoteDone) {
		return io.ErrClosedPipe
	}
	c.readDeadline.set(t)
	c.writeDeadline.set(t)
	return nil
}

// SetReadDeadline implements net.Conn.
func (c *memConn) SetReadDeadline(t time.Time) error {
	if isClosed(c.localDone) || isClosed(c.remoteDone) {
		return io.ErrClosedPipe
	}
	c.readDeadline.set(t)
	return nil
}

// SetWriteDeadline implements net.Conn.
func (c *memConn) SetWriteDeadline(t time.Time) error {
	if isClosed(c.localDone) || isClosed(c.remoteDone) {
		return io.ErrClosedPipe
	}
	c.writeDeadline.set(t)
	return nil
}

// Close implements net.Conn: pending and later calls on both ends fail.
func (c *memConn) Close() error {
	c.once.Do(func() {
		close(c.localDone)
	})
	return nil
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// memDeadline is a deadline whose wait channel is closed when it passes.
type memDeadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	cancel chan struct{} // closed when the deadline passes
}

func newMemDeadline() *memDeadline { return &memDeadline{cancel: make(chan struct{})} }

// set sets the deadline; the zero time clears it.
func (d *memDeadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.cancel // the timer fired: wait for it to close cancel
	}
	d.timer = nil
	closed := isClosed(d.cancel)
	if t.IsZero() {
		if closed {
			d.cancel = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if closed {
			d.cancel = make(chan struct{})
		}
		cancel := d.cancel
		d.timer = time.AfterFunc(dur, func() { close(cancel) })
		return
	}
	if !closed {
		close(d.cancel)
	}
}

// wait returns a channel closed once the deadline passes.
func (d *memDeadline) wait() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancel
}
