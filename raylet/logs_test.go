package raylet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/logline"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/internal/waitfor"
)

// gatedSender is a driver's raylet that takes batches only when let.
type gatedSender struct {
	gate  chan struct{}
	mu    sync.Mutex
	lines []string
	drops uint64
	srcs  []*gorayv1.LogSource
}

func (s *gatedSender) pushLogs(ctx context.Context, driverNode ids.ID, b *gorayv1.LogBatch) (bool, error) {
	select {
	case <-s.gate:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drops += b.Dropped
	for _, l := range b.Lines {
		s.lines = append(s.lines, string(l.Text))
		s.srcs = append(s.srcs, b.Sources[l.Source])
	}
	return true, nil
}

// attachWorker attaches a worker (pid) of job to fw as a worker process
// would be: its stdout and stderr pipes, and log files in dir ("0" and
// "1"). It returns the streams and the pipes' write ends.
func attachWorker(t *testing.T, fw *logForwarder, dir string, job, worker ids.ID, pid int) (*workerStreams, [2]*os.File) {
	t.Helper()
	var rd, wr [2]*os.File
	var files [2]io.WriteCloser
	for i := range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		rd[i], wr[i], files[i] = r, w, f
	}
	ws, err := fw.attach(job, ids.New(), worker, pid, rd, files)
	if err != nil {
		t.Fatal(err)
	}
	return ws, wr
}

// TestForwarderSlowDriver: a worker writing far more than the queue holds
// to a driver that does not take anything is never blocked; lines beyond
// the queue are dropped and counted, the count reaches the driver, the
// rest arrives in order with its attribution, and a drain returns once
// everything written before it was handed over.
func TestForwarderSlowDriver(t *testing.T) {
	dir := t.TempDir()
	send := &gatedSender{gate: make(chan struct{})}
	fw := newLogForwarder(Config{NodeID: ids.New()}, hclog.NewNullLogger(), send)
	defer fw.close()
	job := ids.New()
	ws, wr := attachWorker(t, fw, dir, job, ids.New(), 42)
	const total = 3 * maxJobQueueLines
	written := make(chan error, 1)
	go func() {
		if _, err := wr[0].Write(logline.Marker(logline.Attribution{Task: "main.f"})); err != nil {
			written <- err
			return
		}
		var b strings.Builder
		for i := range total {
			fmt.Fprintf(&b, "%d\n", i)
		}
		_, err := io.WriteString(wr[0], b.String())
		written <- err
	}()
	select {
	case err := <-written:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitfor.Generous):
		t.Fatal("the worker's writes blocked behind a driver that takes nothing")
	}
	close(send.gate)
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	if err := fw.drain(ctx, job); err != nil {
		t.Fatal(err)
	}
	send.mu.Lock()
	got, drops := len(send.lines), send.drops
	last := -1
	for i, l := range send.lines {
		n, err := strconv.Atoi(l)
		if err != nil || n <= last {
			t.Fatalf("line %d is %q after %d: out of order", i, l, last)
		}
		last = n
		if send.srcs[i].Task != "main.f" || send.srcs[i].Pid != 42 {
			t.Fatalf("line %d from %+v, want main.f pid 42", i, send.srcs[i])
		}
	}
	send.mu.Unlock()
	// Drops are reported with the next batch: one more line carries the
	// count of the last ones.
	if _, err := io.WriteString(wr[0], "end\n"); err != nil {
		t.Fatal(err)
	}
	// A drain returns once what was written before it is handed over
	// (TestForwarderDrainWaitsForReadLoop).
	if err := fw.drain(ctx, job); err != nil {
		t.Fatal(err)
	}
	send.mu.Lock()
	got, drops = len(send.lines), send.drops
	send.mu.Unlock()
	if drops == 0 || uint64(got)+drops != total+1 {
		t.Errorf("%d lines arrived and %d were reported dropped; want some dropped and %d in all", got, drops, total+1)
	}
	for _, w := range wr {
		w.Close()
	}
	ws.finish()
	b, err := os.ReadFile(filepath.Join(dir, "0"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(b), "\n"); lines != total+1 || strings.Contains(string(b), "goray:") {
		t.Errorf("the log file has %d lines (want all %d, without the marker)", lines, total+1)
	}
}

// TestHubBounds: a subscriber that does not read loses batches beyond its
// queue, and the count comes with the next batch it gets; subscriptions
// are bounded.
func TestHubBounds(t *testing.T) {
	h := newLogHub()
	job := ids.New()
	if h.deliver(job, &gorayv1.LogBatch{}) {
		t.Error("deliver without a subscription reports subscribed")
	}
	s, err := h.subscribe(job)
	if err != nil {
		t.Fatal(err)
	}
	batch := func(n int) *gorayv1.LogBatch {
		b := &gorayv1.LogBatch{Sources: []*gorayv1.LogSource{{Pid: 1}}}
		for range n {
			b.Lines = append(b.Lines, &gorayv1.LogLine{Text: []byte("x")})
		}
		return b
	}
	for range maxSubQueueLines/maxBatchLines + 3 {
		if !h.deliver(job, batch(maxBatchLines)) {
			t.Fatal("not subscribed")
		}
	}
	q := h.take(s)
	if len(q) != maxSubQueueLines/maxBatchLines {
		t.Fatalf("%d batches queued, want %d", len(q), maxSubQueueLines/maxBatchLines)
	}
	h.deliver(job, batch(1))
	h.mark(job, 7)
	q = h.take(s)
	if len(q) != 2 || q[0].Dropped != 3*maxBatchLines || q[1].FlushId != 7 {
		t.Errorf("after catching up: %d batches, dropped %d, flush %d; want the 3 lost batches counted", len(q), q[0].GetDropped(), q[len(q)-1].GetFlushId())
	}
	for range maxSubsPerJob - 1 {
		if _, err := h.subscribe(job); err != nil {
			t.Fatal(err)
		}
	}
	var tm *TooManySubscriptionsError
	if _, err := h.subscribe(job); !errors.As(err, &tm) {
		t.Errorf("subscription %d: %v, want TooManySubscriptionsError", maxSubsPerJob+1, err)
	}
	h.unsubscribe(s)
	if _, err := h.subscribe(job); err != nil {
		t.Errorf("after an unsubscribe: %v", err)
	}
}

func TestCheckBatch(t *testing.T) {
	job, node := ids.New().Bytes(), ids.New().Bytes()
	src := []*gorayv1.LogSource{{Pid: 1}}
	many := make([]*gorayv1.LogLine, maxBatchLines+1)
	for i := range many {
		many[i] = &gorayv1.LogLine{}
	}
	for _, c := range []struct {
		name string
		b    *gorayv1.LogBatch
		ok   bool
	}{
		{"good", &gorayv1.LogBatch{JobId: job, NodeId: node, Sources: src, Lines: []*gorayv1.LogLine{{Text: []byte("hi")}}}, true},
		{"no job", &gorayv1.LogBatch{NodeId: node}, false},
		{"no node", &gorayv1.LogBatch{JobId: job}, false},
		{"source out of range", &gorayv1.LogBatch{JobId: job, NodeId: node, Sources: src, Lines: []*gorayv1.LogLine{{Source: 1}}}, false},
		{"line too long", &gorayv1.LogBatch{JobId: job, NodeId: node, Sources: src, Lines: []*gorayv1.LogLine{{Text: make([]byte, logline.MaxLine+1)}}}, false},
		{"too many lines", &gorayv1.LogBatch{JobId: job, NodeId: node, Sources: src, Lines: many}, false},
		{"flush id", &gorayv1.LogBatch{JobId: job, NodeId: node, FlushId: 3}, false},
		{"huge task name", &gorayv1.LogBatch{JobId: job, NodeId: node, Sources: []*gorayv1.LogSource{{Task: strings.Repeat("x", maxLogName+1)}}}, false},
		{"huge actor name", &gorayv1.LogBatch{JobId: job, NodeId: node, Sources: []*gorayv1.LogSource{{ActorName: strings.Repeat("x", maxLogName+1)}}}, false},
		{"huge node name", &gorayv1.LogBatch{JobId: job, NodeId: node, NodeName: strings.Repeat("x", maxLogName+1)}, false},
		{"long worker id", &gorayv1.LogBatch{JobId: job, NodeId: node, Sources: []*gorayv1.LogSource{{WorkerId: make([]byte, ids.Size+1)}}}, false},
	} {
		_, err := checkBatch(c.b)
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrBadBatch)) {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// TestLogServicesRefuseStrangers: WorkerLogs and LogFiles answer only
// callers with the cluster token; with it, ListLogs lists the node's log
// directory and ReadLog refuses a way out of it.
func TestLogServicesRefuseStrangers(t *testing.T) {
	dir, err := os.MkdirTemp("", "rl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	r, err := New(Config{Store: newFakeStore(), SessionDir: dir, SocketPath: filepath.Join(dir, "r.sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	if err := os.WriteFile(filepath.Join(dir, "logs", "node.log"), []byte("a\nb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := auth.New("the-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(rpc.ServerOptions(creds)...)
	r.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	defer g.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	dial := func(c *auth.Credentials) *grpc.ClientConn {
		cc, err := rpc.Dial(lis.Addr().String(), c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	wrong, err := auth.New("not-the-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	job := ids.New().Bytes()
	for name, c := range map[string]*auth.Credentials{"no token": nil, "wrong token": wrong} {
		cc := dial(c)
		files, logs := gorayv1.NewLogFilesClient(cc), gorayv1.NewWorkerLogsClient(cc)
		calls := map[string]func() error{
			"ListLogs": func() error { _, err := files.ListLogs(ctx, &gorayv1.ListLogsRequest{}); return err },
			"ReadLog": func() error {
				st, err := files.ReadLog(ctx, &gorayv1.ReadLogRequest{Name: "node.log"})
				if err == nil {
					_, err = st.Recv()
				}
				return err
			},
			"Subscribe": func() error {
				st, err := logs.Subscribe(ctx, &gorayv1.SubscribeLogsRequest{JobId: job})
				if err == nil {
					_, err = st.Recv()
				}
				return err
			},
			"Push":  func() error { _, err := logs.Push(ctx, &gorayv1.LogBatch{JobId: job}); return err },
			"Flush": func() error { _, err := logs.Flush(ctx, &gorayv1.FlushLogsRequest{JobId: job}); return err },
			"Drain": func() error { _, err := logs.Drain(ctx, &gorayv1.DrainLogsRequest{JobId: job}); return err },
		}
		for call, f := range calls {
			if err := f(); status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s: %s: %v, want Unauthenticated", name, call, err)
			}
		}
	}
	files := gorayv1.NewLogFilesClient(dial(creds))
	rep, err := files.ListLogs(ctx, &gorayv1.ListLogsRequest{})
	if err != nil || len(rep.Files) != 1 || rep.Files[0].Name != "node.log" {
		t.Fatalf("ListLogs with the token: %v, %v", rep, err)
	}
	st, err := files.ReadLog(ctx, &gorayv1.ReadLogRequest{Name: "node.log", TailLines: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := st.Recv(); err != nil || string(c.Data) != "b\n" {
		t.Errorf("ReadLog tail 1: %q, %v", c.GetData(), err)
	}
	st, err = files.ReadLog(ctx, &gorayv1.ReadLogRequest{Name: "../node.json"})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("ReadLog ../node.json: %v, want InvalidArgument", err)
	}
}

// TestForwarderEndJobStopsSender: the goroutine that pushes a job's lines
// ends with the job (a long-lived node runs many jobs).
func TestForwarderEndJobStopsSender(t *testing.T) {
	send := &gatedSender{gate: make(chan struct{})}
	close(send.gate)
	fw := newLogForwarder(Config{NodeID: ids.New()}, hclog.NewNullLogger(), send)
	defer fw.close()
	job := ids.New()
	ws, wr := attachWorker(t, fw, t.TempDir(), job, ids.New(), 7)
	w, w2 := wr[0], wr[1]
	if _, err := io.WriteString(w, "hello\n"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	if err := fw.drain(ctx, job); err != nil {
		t.Fatal(err)
	}
	w.Close()
	w2.Close()
	ws.finish()
	fw.endJob(job)
	done := make(chan struct{})
	go func() { fw.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitfor.Generous):
		t.Fatal("the job's sender still runs after endJob")
	}
}

// TestForwarderDrainWaitsForReadLoop: a line a worker wrote before a drain
// has been handed over when the drain returns, also when the forwarder's
// read loop took it from the pipe just before the drain looked there and
// has not handled it yet: the drain waits for the read loop. A driver's
// Shutdown relies on it to print the line its last call printed
// (acceptance TestLogsEmbedded missed that line under load).
func TestForwarderDrainWaitsForReadLoop(t *testing.T) {
	send := &gatedSender{gate: make(chan struct{})}
	close(send.gate)
	fw := newLogForwarder(Config{NodeID: ids.New()}, hclog.NewNullLogger(), send)
	defer fw.close()
	took, release := make(chan struct{}, 1), make(chan struct{})
	// The read loop stops between reading a chunk and handling it.
	fw.afterRead = func() {
		took <- struct{}{}
		<-release
	}
	job := ids.New()
	ws, wr := attachWorker(t, fw, t.TempDir(), job, ids.New(), 7)
	released := false
	defer func() {
		if !released {
			close(release)
		}
		for _, w := range wr {
			w.Close()
		}
		ws.finish()
	}()
	if _, err := io.WriteString(wr[0], "last words\n"); err != nil {
		t.Fatal(err)
	}
	<-took // the pipe is empty; the line is in the read loop's hands
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- fw.drain(ctx, job) }()
	// Let the read loop go on once the drain returned (wrongly: the line
	// is not handed over yet) or waits for the read loop's lock.
	var derr error
	returned := false
	waitfor.Cond(t, waitfor.Generous, "the drain to return or to wait for the read loop", func() bool {
		select {
		case derr = <-drained:
			returned = true
			return true
		default:
		}
		buf := make([]byte, 1<<20)
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "(*outStream).readAvailable") && strings.Contains(g, "Mutex).Lock") {
				return true
			}
		}
		return false
	})
	send.mu.Lock()
	early := len(send.lines)
	send.mu.Unlock()
	close(release)
	released = true
	if !returned {
		derr = <-drained
	}
	if derr != nil {
		t.Fatal(derr)
	}
	if returned {
		t.Fatalf("the drain returned while the line it follows was still being read (%d lines handed over)", early)
	}
	send.mu.Lock()
	defer send.mu.Unlock()
	if len(send.lines) != 1 || send.lines[0] != "last words" {
		t.Errorf("handed over %q when the drain returned, want [\"last words\"]", send.lines)
	}
}
