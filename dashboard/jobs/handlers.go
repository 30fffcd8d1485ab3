package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/internal/digest"
	"github.com/goray-dev/goray/internal/logrotate"
)

// Routes of the job API (net/http ServeMux patterns).
const (
	routeBinaryHead  = "HEAD /api/binaries/{sha256}"
	routeBinaryPut   = "PUT /api/binaries/{sha256}"
	routeBinaryStats = "GET /api/binaries/{$}"
	routeSubmit      = "POST /api/jobs/{$}"
	routeList        = "GET /api/jobs/{$}"
	routeGet         = "GET /api/jobs/{id}"
	routeLogs        = "GET /api/jobs/{id}/logs"
	routeStop        = "POST /api/jobs/{id}/stop"
	routeDelete      = "DELETE /api/jobs/{id}"
)

// uploadIdle bounds how long an upload may go without progress before the
// head gives up on it; followPoll is how often a followed log is read
// again; uploadRetry is the Retry-After of an upload refused for
// ErrTooManyUploads.
const (
	uploadIdle  = 60 * time.Second
	followPoll  = 200 * time.Millisecond
	uploadRetry = "5"
)

// Mux is where the handlers mount: a *dashboard.Server or an
// *http.ServeMux.
type Mux interface {
	Handle(pattern string, h http.Handler)
}

// Register mounts the job API on m.
func Register(m Mux, s *Supervisor, b *Binaries) {
	register(m, s, b, dashboard.RequestTimeout)
}

// register mounts the job API on m; a log stream ends when one of its
// writes blocks for writeIdle (the client stopped reading).
func register(m Mux, s *Supervisor, b *Binaries, writeIdle time.Duration) {
	h := &handlers{s: s, b: b, writeIdle: writeIdle}
	m.Handle(routeBinaryHead, http.HandlerFunc(h.binaryHead))
	m.Handle(routeBinaryPut, http.HandlerFunc(h.binaryPut))
	m.Handle(routeBinaryStats, http.HandlerFunc(h.binaryStats))
	m.Handle(routeSubmit, http.HandlerFunc(h.submit))
	m.Handle(routeList, http.HandlerFunc(h.list))
	m.Handle(routeGet, http.HandlerFunc(h.get))
	m.Handle(routeLogs, http.HandlerFunc(h.logs))
	m.Handle(routeStop, http.HandlerFunc(h.stop))
	m.Handle(routeDelete, http.HandlerFunc(h.del))
}

type handlers struct {
	s         *Supervisor
	b         *Binaries
	writeIdle time.Duration
}

// fail answers err with the status code its kind stands for.
func fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var inv *InvalidError
	var mm *HashMismatchError
	var tl *TooLargeError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &inv), errors.As(err, &mm), errors.Is(err, ErrBadSHA256):
		code = http.StatusBadRequest
	case errors.As(err, &tl), errors.As(err, &mb):
		code = http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrExists), errors.Is(err, ErrNotFinished):
		code = http.StatusConflict
	case errors.Is(err, ErrTooManyJobs):
		code = http.StatusTooManyRequests
	case errors.Is(err, ErrClosed):
		code = http.StatusServiceUnavailable
	case errors.Is(err, ErrTooManyUploads):
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", uploadRetry)
	}
	dashboard.WriteError(w, code, "%v", err)
}

func (h *handlers) binaryHead(w http.ResponseWriter, r *http.Request) {
	size, ok, err := h.b.Has(r.PathValue("sha256"))
	switch {
	case err != nil:
		w.WriteHeader(http.StatusBadRequest)
	case !ok:
		w.WriteHeader(http.StatusNotFound)
	default:
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		w.WriteHeader(http.StatusOK)
	}
}

func (h *handlers) binaryPut(w http.ResponseWriter, r *http.Request) {
	sha := r.PathValue("sha256")
	if !digest.ValidSHA256(sha) {
		fail(w, fmt.Errorf("the URL's sha256 %q is %w", sha, ErrBadSHA256))
		return
	}
	if r.ContentLength > h.b.Max() {
		fail(w, fmt.Errorf("Content-Length %d: %w", r.ContentLength, &TooLargeError{Limit: h.b.Max()}))
		return
	}
	// The body may take long: the deadline moves with every read.
	rc := http.NewResponseController(w)
	body := &deadlineReader{r: r.Body, rc: rc}
	size, uploaded, err := h.b.Put(sha, body)
	if err != nil {
		fail(w, err)
		return
	}
	_ = rc.SetWriteDeadline(time.Now().Add(dashboard.RequestTimeout))
	code := http.StatusOK
	if uploaded {
		code = http.StatusCreated
	}
	dashboard.WriteJSON(w, code, BinaryResponse{SHA256: sha, Size: size, Uploaded: uploaded})
}

// deadlineReader moves the connection's read deadline uploadIdle ahead of
// every read, so an upload may take as long as it keeps moving.
type deadlineReader struct {
	r  io.Reader
	rc *http.ResponseController
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	_ = d.rc.SetReadDeadline(time.Now().Add(uploadIdle))
	return d.r.Read(p)
}

func (h *handlers) binaryStats(w http.ResponseWriter, r *http.Request) {
	dashboard.WriteJSON(w, http.StatusOK, h.b.Stats())
}

func (h *handlers) submit(w http.ResponseWriter, r *http.Request) {
	var req SubmitRequest
	if err := dashboard.ReadJSON(w, r, &req); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			fail(w, err)
			return
		}
		dashboard.WriteError(w, http.StatusBadRequest, "POST /api/jobs/: %v", err)
		return
	}
	id, err := h.s.Submit(req)
	if err != nil {
		fail(w, err)
		return
	}
	dashboard.WriteJSON(w, http.StatusOK, SubmitResponse{SubmissionID: id})
}

func (h *handlers) list(w http.ResponseWriter, r *http.Request) {
	dashboard.WriteJSON(w, http.StatusOK, ListResponse{Jobs: h.s.List()})
}

func (h *handlers) get(w http.ResponseWriter, r *http.Request) {
	j, err := h.s.Get(r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	dashboard.WriteJSON(w, http.StatusOK, j)
}

func (h *handlers) stop(w http.ResponseWriter, r *http.Request) {
	ok, err := h.s.Stop(r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	dashboard.WriteJSON(w, http.StatusOK, StopResponse{Stopped: ok})
}

func (h *handlers) del(w http.ResponseWriter, r *http.Request) {
	if err := h.s.Delete(r.PathValue("id")); err != nil {
		fail(w, err)
		return
	}
	dashboard.WriteJSON(w, http.StatusOK, DeleteResponse{Deleted: true})
}

// logs answers the driver's log as text; with ?follow=1 it goes on
// sending what the driver writes until the job finished and its log is
// sent, or the client goes away.
func (h *handlers) logs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	follow := false
	if v := r.URL.Query().Get("follow"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			dashboard.WriteError(w, http.StatusBadRequest, "query parameter follow=%q: want 1, true, 0 or false", v)
			return
		}
		follow = b
	}
	j, changed, err := h.s.Watch(id)
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// A long log, or a followed one, may take a while: no read deadline
	// (an expired one would also end the request's context), and a write
	// deadline moved ahead of every write, so that the stream goes on as
	// long as the client reads it and ends when it stops (a client that
	// goes away ends the request).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	out := &deadlineWriter{w: w, rc: rc, idle: h.writeIdle}
	// The log is read across its rotated files (internal/logrotate).
	send := func(b []byte) error {
		if _, err := out.Write(b); err != nil {
			return err
		}
		return out.Flush()
	}
	ctx := r.Context()
	if !follow {
		sent := false
		err := logrotate.Read(ctx, j.LogFile, logrotate.ReadOptions{}, func(b []byte) error {
			sent = true
			_, err := out.Write(b)
			return err
		})
		if err != nil && !sent && !errors.Is(err, os.ErrNotExist) { // not started yet, or its driver never ran: empty
			fail(w, err)
		}
		return
	}
	w.WriteHeader(http.StatusOK)
	if err := out.Flush(); err != nil {
		return
	}
	// Until the driver started, there is no file yet.
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		if _, err := os.Stat(j.LogFile); err == nil || j.Status.Terminal() {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
			if j, changed, err = h.s.Watch(id); err != nil {
				return // deleted
			}
		case <-tick.C:
		}
	}
	// Follow until the job is over: then what the log holds is sent.
	over := make(chan struct{})
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func(j Job, changed <-chan struct{}) {
		defer close(over)
		for !j.Status.Terminal() {
			select {
			case <-fctx.Done():
				return
			case <-changed:
				var err error
				if j, changed, err = h.s.Watch(id); err != nil {
					return // deleted
				}
			}
		}
	}(j, changed)
	_ = logrotate.Read(fctx, j.LogFile, logrotate.ReadOptions{Follow: true, Poll: followPoll, Until: over}, send)
	cancel()
	<-over
}

// deadlineWriter sets the connection's write deadline idle ahead before
// every write and flush to w, so that a stream may take as long as each
// of its writes moves.
type deadlineWriter struct {
	w    io.Writer
	rc   *http.ResponseController
	idle time.Duration
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.idle))
	return d.w.Write(p)
}

// Flush sends what is buffered.
func (d *deadlineWriter) Flush() error {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.idle))
	return d.rc.Flush()
}
