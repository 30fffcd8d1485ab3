package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/logrotate"
	"github.com/goray-dev/goray/internal/waitfor"
)

const testToken = "test-token-0123456789"

// apiFixture serves the job API over a real dashboard server.
type apiFixture struct {
	*fixture
	srv  *dashboard.Server
	base string
	hc   *http.Client
}

func newAPI(t *testing.T, maxBinary int64) *apiFixture {
	t.Helper()
	return newAPIWith(t, maxBinary, Options{StopGrace: 300 * time.Millisecond})
}

// newAPIWith is newAPI with the supervisor's options o.
func newAPIWith(t *testing.T, maxBinary int64, o Options) *apiFixture {
	t.Helper()
	f := newFixture(t, o)
	if maxBinary > 0 {
		f.bins.max = maxBinary
	}
	creds, err := auth.New(testToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dashboard.Listen(dashboard.Options{Port: -1, Auth: creds})
	if err != nil {
		t.Fatal(err)
	}
	Register(srv, f.sup, f.bins)
	srv.Serve()
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return &apiFixture{fixture: f, srv: srv, base: srv.URL(), hc: hc}
}

// call sends a request with the token (unless token is "") and returns
// the status and body.
func (a *apiFixture) call(method, path, token string, body []byte) (int, string) {
	a.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, a.base+path, r)
	if err != nil {
		a.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func shaOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestAPIRefusesCallersWithoutToken(t *testing.T) {
	leaktest.Goroutines(t)
	a := newAPI(t, 0)
	sha := strings.Repeat("0", 64)
	routes := []struct{ method, path string }{
		{"HEAD", "/api/binaries/" + sha}, {"PUT", "/api/binaries/" + sha}, {"GET", "/api/binaries/"},
		{"POST", "/api/jobs/"}, {"GET", "/api/jobs/"}, {"GET", "/api/jobs/x"}, {"GET", "/api/jobs/x/logs"},
		{"GET", "/api/jobs/x/logs?follow=1"}, {"POST", "/api/jobs/x/stop"}, {"DELETE", "/api/jobs/x"},
		{"GET", "/"}, {"GET", "/no/such/route"},
	}
	for _, r := range routes {
		for _, tok := range []string{"", "wrong-token"} {
			code, body := a.call(r.method, r.path, tok, []byte("{}"))
			if code != http.StatusUnauthorized {
				t.Errorf("%s %s with token %q: %d %s, want 401", r.method, r.path, tok, code, body)
			}
		}
	}
	// The cookie a browser keeps works like the header.
	req, _ := http.NewRequest("GET", a.base+"/api/jobs/", nil)
	req.AddCookie(&http.Cookie{Name: auth.CookieName, Value: testToken})
	resp, err := a.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /api/jobs/ with the cookie: %d", resp.StatusCode)
	}
}

func TestAPIBadInput(t *testing.T) {
	leaktest.Goroutines(t)
	a := newAPI(t, 1024)
	good := []byte("#!/bin/sh\necho hi\n")
	sha := shaOf(good)
	other := shaOf([]byte("something else"))
	for _, tc := range []struct {
		name, method, path string
		body               []byte
		code               int
		want               string
	}{
		{"head unknown", "HEAD", "/api/binaries/" + sha, nil, 404, ""},
		{"head bad sha", "HEAD", "/api/binaries/xyz", nil, 400, ""},
		{"put bad sha", "PUT", "/api/binaries/XYZ", good, 400, "not a sha256"},
		{"put wrong hash", "PUT", "/api/binaries/" + other, good, 400, "hash to sha256 " + sha},
		{"put too large", "PUT", "/api/binaries/" + other, bytes.Repeat([]byte("x"), 2000), 413, "larger than the head accepts (1024 bytes"},
		{"put", "PUT", "/api/binaries/" + sha, good, 201, `"uploaded": true`},
		{"put again", "PUT", "/api/binaries/" + sha, good, 200, `"uploaded": false`},
		{"head known", "HEAD", "/api/binaries/" + sha, nil, 200, ""},
		{"stats", "GET", "/api/binaries/", nil, 200, `"uploads": 1`},
		{"submit unknown binary", "POST", "/api/jobs/", []byte(`{"binary_sha256": "` + other + `"}`), 400, "binary_sha256: " + other + ": no binary with this sha256"},
		{"submit id ..", "POST", "/api/jobs/", []byte(`{"binary_sha256": "` + sha + `", "submission_id": ".."}`), 400, "starting with a letter or digit"},
		{"submit record too large", "POST", "/api/jobs/", []byte(`{"binary_sha256": "` + sha + `", "args": ["` + strings.Repeat("a", MaxRecordExtras) + `"]}`), 400, "at most 16384 bytes (16 KiB) of them per job"},
		{"submit bad json", "POST", "/api/jobs/", []byte(`{"binary_sha256": `), 400, "invalid JSON"},
		{"submit wrong type", "POST", "/api/jobs/", []byte(`{"binary_sha256": "` + sha + `", "args": "x"}`), 400, `field \"args\": want a JSON []string`},
		{"submit unknown field", "POST", "/api/jobs/", []byte(`{"binary": "x"}`), 400, `unknown field \"binary\"`},
		{"submit empty", "POST", "/api/jobs/", nil, 400, "empty request body"},
		{"submit two values", "POST", "/api/jobs/", []byte(`{} {}`), 400, "more than one value"},
		{"submit oversized", "POST", "/api/jobs/", append([]byte(`{"args": ["`), bytes.Repeat([]byte("a"), dashboard.MaxJSONBody)...), 413, "larger than"},
		{"get unknown", "GET", "/api/jobs/nope", nil, 404, `\"nope\": no such job`},
		{"logs unknown", "GET", "/api/jobs/nope/logs", nil, 404, "no such job"},
		{"logs bad follow", "GET", "/api/jobs/nope/logs?follow=maybe", nil, 400, "follow=\\\"maybe\\\""},
		{"stop unknown", "POST", "/api/jobs/nope/stop", nil, 404, "no such job"},
		{"delete unknown", "DELETE", "/api/jobs/nope", nil, 404, "no such job"},
		{"wrong method", "PATCH", "/api/jobs/", nil, 405, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := a.call(tc.method, tc.path, testToken, tc.body)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Fatalf("%s %s: %d %s; want %d with %q", tc.method, tc.path, code, body, tc.code, tc.want)
			}
		})
	}
}

func TestAPIJobLifecycle(t *testing.T) {
	leaktest.Goroutines(t)
	a := newAPI(t, 0)
	bin := []byte("#!/bin/sh\necho \"start $1\"\nwhile [ ! -e go ]; do sleep 0.05; done\necho done\n")
	sha := shaOf(bin)
	if code, body := a.call("PUT", "/api/binaries/"+sha, testToken, bin); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	code, body := a.call("POST", "/api/jobs/", testToken, []byte(`{"binary_sha256": "`+sha+`", "args": ["x"], "submission_id": "j1", "metadata": {"k": "v"}}`))
	if code != 200 || !strings.Contains(body, `"submission_id": "j1"`) {
		t.Fatalf("submit: %d %s", code, body)
	}
	j := a.wait("j1", "RUNNING", func(j Job) bool { return j.Status == StatusRunning })
	if code, body := a.call("DELETE", "/api/jobs/j1", testToken, nil); code != 409 || !strings.Contains(body, "has not finished") {
		t.Fatalf("delete running: %d %s", code, body)
	}
	// A followed log streams what the driver writes and ends with the job.
	req, _ := http.NewRequest("GET", a.base+"/api/jobs/j1/logs?follow=1", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := a.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make([]byte, len("start x\n"))
	if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != "start x\n" {
		t.Fatalf("first followed line: %q, %v", got, err)
	}
	if err := writeFile(j.WorkingDir+"/go", ""); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "done\n" {
		t.Fatalf("rest of the followed log: %q, %v", rest, err)
	}
	a.finished("j1")
	if code, body := a.call("GET", "/api/jobs/j1/logs", testToken, nil); code != 200 || body != "start x\ndone\n" {
		t.Fatalf("logs: %d %q", code, body)
	}
	code, body = a.call("GET", "/api/jobs/", testToken, nil)
	var list ListResponse
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Jobs) != 1 || list.Jobs[0].Status != StatusSucceeded || list.Jobs[0].Metadata["k"] != "v" {
		t.Fatalf("list: %d %s", code, body)
	}
	if code, body := a.call("POST", "/api/jobs/j1/stop", testToken, nil); code != 200 || !strings.Contains(body, `"stopped": false`) {
		t.Fatalf("stop finished: %d %s", code, body)
	}
	if code, body := a.call("DELETE", "/api/jobs/j1", testToken, nil); code != 200 {
		t.Fatalf("delete: %d %s", code, body)
	}
	if code, _ := a.call("GET", "/api/jobs/j1", testToken, nil); code != 404 {
		t.Fatalf("get after delete: %d", code)
	}
}

func writeFile(path, s string) error {
	return os.WriteFile(path, []byte(s), 0o600)
}

// hookMux mounts handlers on an http.ServeMux and reports on done every
// time a logs request's handler returned.
type hookMux struct {
	mux  *http.ServeMux
	done chan struct{}
}

func (m *hookMux) Handle(pattern string, h http.Handler) {
	if pattern != routeLogs {
		m.mux.Handle(pattern, h)
		return
	}
	m.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { m.done <- struct{}{} }()
		h.ServeHTTP(w, r)
	}))
}

// A client that asks for a log and stops reading ends the stream once a
// write has been blocked for the write timeout: its handler returns (and
// closes the log file) although the client stays connected.
func TestLogStreamEndsWhenClientStopsReading(t *testing.T) {
	leaktest.Goroutines(t)
	f := newFixture(t, Options{StopGrace: 300 * time.Millisecond})
	hm := &hookMux{mux: http.NewServeMux(), done: make(chan struct{}, 4)}
	register(hm, f.sup, f.bins, 300*time.Millisecond)
	srv := httptest.NewServer(hm.mux)
	t.Cleanup(srv.Close)
	id, err := f.sup.Submit(SubmitRequest{BinarySHA256: f.script(`exec sleep 60`), SubmissionID: "big"})
	if err != nil {
		t.Fatal(err)
	}
	j := f.wait(id, "RUNNING", func(j Job) bool { return j.Status == StatusRunning })
	// More than the socket buffers between the handler and the client
	// hold: the handler's writes block.
	lf, err := os.OpenFile(j.LogFile, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lf.Write(bytes.Repeat([]byte("x"), 32<<20))
	if cerr := lf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, query := range []string{"?follow=1", ""} {
		t.Run("logs"+query, func(t *testing.T) {
			// A small receive buffer, and never a read.
			d := net.Dialer{Control: func(network, address string, c syscall.RawConn) error {
				var serr error
				err := c.Control(func(fd uintptr) {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
				})
				return errors.Join(err, serr)
			}}
			conn, err := d.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, "GET /api/jobs/big/logs"+query+" HTTP/1.1\r\nHost: jobs\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-hm.done:
			case <-time.After(waitfor.Generous):
				t.Fatal("the logs handler still writes to a client that reads nothing, 20 s on")
			}
		})
	}
}

// TestAPILogAcrossRotations: a driver writing 2.7 MB with 1 MiB log files
// (3 rotated copies kept): its log rotates, and the API's log, followed
// from the start or read after the end, is everything it wrote, in order,
// across the files.
func TestAPILogAcrossRotations(t *testing.T) {
	leaktest.Goroutines(t)
	a := newAPIWith(t, 0, Options{StopGrace: 300 * time.Millisecond, LogLimits: logrotate.Limits{MaxFileSize: 1 << 20, MaxFiles: 3}})
	id, err := a.sup.Submit(SubmitRequest{BinarySHA256: a.script(`echo start; while [ ! -e go ]; do sleep 0.05; done; seq 1 400000; echo done`), SubmissionID: "rot"})
	if err != nil {
		t.Fatal(err)
	}
	j := a.wait(id, "RUNNING", func(j Job) bool { return j.Status == StatusRunning })
	req, _ := http.NewRequest("GET", a.base+"/api/jobs/rot/logs?follow=1", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := a.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make([]byte, len("start\n"))
	if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != "start\n" {
		t.Fatalf("first followed line: %q, %v", got, err)
	}
	if err := writeFile(j.WorkingDir+"/go", ""); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	want.WriteString("start\n")
	for i := 1; i <= 400000; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	want.WriteString("done\n")
	rest, err := io.ReadAll(resp.Body)
	if err != nil || "start\n"+string(rest) != want.String() {
		t.Fatalf("followed log: %d bytes (%v), want %d, in order", len(rest)+6, err, want.Len())
	}
	a.finished(id)
	files, err := logrotate.Files(j.LogFile)
	if err != nil || len(files) < 3 {
		t.Fatalf("the driver's log did not rotate twice: %q, %v", files, err)
	}
	if code, body := a.call("GET", "/api/jobs/rot/logs", testToken, nil); code != 200 || body != want.String() {
		t.Fatalf("log after the end: %d, %d bytes, want %d", code, len(body), want.Len())
	}
	// Deleting the job removes its rotated copies too.
	if code, body := a.call("DELETE", "/api/jobs/rot", testToken, nil); code != 200 {
		t.Fatalf("delete: %d %s", code, body)
	}
	if files, _ := logrotate.Files(j.LogFile); len(files) != 0 {
		t.Errorf("left after delete: %q", files)
	}
}
