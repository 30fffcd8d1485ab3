package mototest

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// Proxy is a reverse proxy in front of a moto server that injects EC2
// errors: what the real API answers under load or without capacity,
// which the emulator never does by itself. Calls it does not fail reach
// the server unchanged.
type Proxy struct {
	// URL is the proxy's endpoint, http://127.0.0.1:<port>.
	URL string

	mu     sync.Mutex
	faults map[string][]fault
	after  map[string][]func(form url.Values, body []byte)
	calls  map[string]int
	failed map[string]int
}

// fault is an injected error: the next times calls of an action answer it
// (times < 0: every call).
type fault struct {
	code, message string
	status, times int
}

// NewProxy starts a proxy in front of the server at target (a Server's
// Endpoint) and stops it when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatalf("mototest: proxy target %q: %v", target, err)
	}
	p := &Proxy{faults: map[string][]fault{}, after: map[string][]func(url.Values, []byte){}, calls: map[string]int{}, failed: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serve(w, r, rp) }))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Status codes EC2 answers its errors with.
var statusOf = map[string]int{
	"RequestLimitExceeded":         http.StatusServiceUnavailable,
	"Throttling":                   http.StatusBadRequest,
	"InsufficientInstanceCapacity": http.StatusInternalServerError,
	"InstanceLimitExceeded":        http.StatusBadRequest,
	"Unavailable":                  http.StatusServiceUnavailable,
	"InternalError":                http.StatusInternalServerError,
}

// Fail makes the next times calls of action (an EC2 API action such as
// "RunInstances") answer the EC2 error code, with EC2's status for it
// (400 when unknown); times < 0 fails every call until Clear. Faults of
// one action are used in the order they were added.
func (p *Proxy) Fail(action, code string, times int) {
	p.FailWith(action, code, "injected by mototest: "+code, times)
}

// FailWith is Fail with the error's message (XML-escaped).
func (p *Proxy) FailWith(action, code, message string, times int) {
	if times == 0 {
		return
	}
	status, ok := statusOf[code]
	if !ok {
		status = http.StatusBadRequest
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var esc strings.Builder
	_ = xml.EscapeText(&esc, []byte(message))
	p.faults[action] = append(p.faults[action], fault{code: code, message: esc.String(), status: status, times: times})
}

// Clear drops the faults not used up yet.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = map[string][]fault{}
}

// After runs fn with the request's form and the server's answer after
// every call of action the server answered with success, before the
// answer goes back to the caller.
func (p *Proxy) After(action string, fn func(form url.Values, body []byte)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.after[action] = append(p.after[action], fn)
}

// Calls returns how many calls of action reached the proxy, and how many
// of them it failed.
func (p *Proxy) Calls(action string) (calls, failed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[action], p.failed[action]
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, rp *httputil.ReverseProxy) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	form, _ := url.ParseQuery(string(body))
	action := form.Get("Action")
	p.mu.Lock()
	p.calls[action]++
	var f *fault
	if fs := p.faults[action]; len(fs) > 0 {
		cp := fs[0]
		f = &cp
		if fs[0].times > 0 {
			fs[0].times--
			if fs[0].times == 0 {
				p.faults[action] = fs[1:]
			}
		}
		p.failed[action]++
	}
	hooks := append([]func(url.Values, []byte){}, p.after[action]...)
	p.mu.Unlock()
	if f != nil {
		w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>mototest-fault</RequestID></Response>`, f.code, f.message)
		return
	}
	if len(hooks) == 0 {
		rp.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	rp.ServeHTTP(rec, r)
	if rec.Code == http.StatusOK {
		for _, fn := range hooks {
			fn(form, rec.Body.Bytes())
		}
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// instanceIDRE finds the instance ids in an EC2 answer.
var instanceIDRE = regexp.MustCompile(`<instanceId>(i-[0-9a-f]+)</instanceId>`)

// TerminateMarked makes the proxy end, through the server s directly and
// before the caller gets its answer, the instances of every RunInstances
// call one of whose parameters is marker (the value of a tag, say): what
// EC2 does to a spot instance it finds no capacity for, behind the
// launcher's back. A failure to terminate fails t.
func (p *Proxy) TerminateMarked(t testing.TB, s *Server, marker string) {
	direct := ec2.NewFromConfig(AWSConfig(s.Endpoint))
	p.After("RunInstances", func(form url.Values, body []byte) {
		marked := false
		for _, vs := range form {
			marked = marked || slices.Contains(vs, marker)
		}
		if !marked {
			return
		}
		var ids []string
		for _, m := range instanceIDRE.FindAllSubmatch(body, -1) {
			ids = append(ids, string(m[1]))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := direct.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids}); err != nil {
			t.Errorf("mototest: terminating the marked instances %v: %v", ids, err)
		}
	})
}
