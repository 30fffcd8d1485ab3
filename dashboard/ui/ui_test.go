package ui

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/dashboard/jobs"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/leaktest"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/state"
)

const token = "ui-test-token-0123456789"

// fakeSource serves fixed tables (a unit test's stand-in for the GCS and
// the raylets; the acceptance test runs the real ones).
type fakeSource struct {
	views  []*pb.NodeView
	jobs   []*pb.JobInfo
	actors []*pb.ActorInfo
	groups []*pb.PlacementGroupInfo
	tasks  []*pb.TaskStatus
	stats  map[string]*pb.GetNodeStatsReply
}

func (f *fakeSource) Nodes(context.Context) ([]*pb.NodeView, error)   { return f.views, nil }
func (f *fakeSource) Jobs(context.Context) ([]*pb.JobInfo, error)     { return f.jobs, nil }
func (f *fakeSource) Actors(context.Context) ([]*pb.ActorInfo, error) { return f.actors, nil }
func (f *fakeSource) PlacementGroups(context.Context) ([]*pb.PlacementGroupInfo, error) {
	return f.groups, nil
}
func (f *fakeSource) NodeStats(_ context.Context, n *pb.NodeInfo, _ bool) (*pb.GetNodeStatsReply, error) {
	return f.stats[hexID(n.GetNodeId())], nil
}

// ListTasks applies the filters, as the GCS does, and the limit
// (newest).
func (f *fakeSource) ListTasks(_ context.Context, req *pb.ListTasksRequest) (*pb.ListTasksReply, error) {
	var fs []state.Filter
	for _, flt := range req.GetFilters() {
		fs = append(fs, state.Filter{Key: flt.GetKey(), Value: flt.GetValue()})
	}
	var out []*pb.TaskStatus
	for _, t := range f.tasks {
		p, err := state.Apply([]state.TaskRow{state.TaskRowOf(t)}, fs, 0)
		if err != nil {
			return nil, err
		}
		if p.Total == 1 {
			out = append(out, t)
		}
	}
	total := len(out)
	if l := int(req.GetLimit()); l > 0 && len(out) > l {
		out = out[len(out)-l:]
	}
	return &pb.ListTasksReply{Tasks: out, Total: int64(total)}, nil
}

func id(b byte) []byte { return []byte{b, b, b, b, b, b, b, b, b, b, b, b, b, b, b, b} }

func res(m map[string]float64) *pb.Resources {
	s, err := resources.FromFloats(m)
	if err != nil {
		panic(err)
	}
	return &pb.Resources{Amounts: s}
}

func newFake() *fakeSource {
	const us = int64(1_700_000_000_000_000)
	task := func(b byte, fn, st string, node byte) *pb.TaskStatus {
		return &pb.TaskStatus{TaskId: id(b), JobId: id(0x0a), Function: fn, State: st, NodeId: id(node), WorkerId: id(node + 1), Pid: 100,
			Kind: pb.TaskKind_TASK_KIND_NORMAL, Phases: []*pb.TaskPhase{
				{Phase: "scheduling", StartUs: us, EndUs: us + 1000},
				{Phase: "execution", StartUs: us + 1000, EndUs: us + 5000 + int64(b)*100},
			}}
	}
	return &fakeSource{
		views: []*pb.NodeView{
			{Info: &pb.NodeInfo{NodeId: id(0x22), NodeName: "worker-node", State: "ALIVE", RayletTcp: "127.0.0.2:4000", StartTimeMs: 2,
				Total: res(map[string]float64{"CPU": 2, "memory": 1 << 30})}, Available: res(map[string]float64{"CPU": 2, "memory": 1 << 30}), StoreCapacity: 1 << 20},
			{Info: &pb.NodeInfo{NodeId: id(0x11), NodeName: "head-node", State: "ALIVE", IsHead: true, RayletTcp: "127.0.0.1:4000", StartTimeMs: 1,
				Total: res(map[string]float64{"CPU": 4, "memory": 2 << 30})}, Available: res(map[string]float64{"CPU": 1, "memory": 1 << 30}), StoreUsed: 1 << 19, StoreCapacity: 1 << 20},
		},
		jobs:   []*pb.JobInfo{{JobId: id(0x0a), State: "RUNNING", DriverPid: 42, DriverNodeId: id(0x11), BinaryPath: "/bin/driver", StartTimeMs: 5}},
		actors: []*pb.ActorInfo{{ActorId: id(0x33), ClassName: "main.Counter", Name: "counter", State: pb.ActorState_ACTOR_STATE_ALIVE, JobId: id(0x0a), Address: &pb.Address{NodeId: id(0x22), WorkerId: id(0x44)}, Pid: 77, NumRestarts: 1, MaxRestarts: 3, Namespace: "shop", Detached: true}},
		groups: []*pb.PlacementGroupInfo{{PlacementGroupId: id(0x55), Name: "pg", State: pb.PlacementGroupState_PLACEMENT_GROUP_STATE_CREATED,
			Bundles: []*pb.Bundle{{Index: 0, Resources: res(map[string]float64{"CPU": 1}), NodeId: id(0x11)}}}},
		tasks: []*pb.TaskStatus{task(1, "main.square", "FINISHED", 0x11), task(2, "main.square", "FINISHED", 0x22), task(3, "main.fail", "FAILED", 0x22), task(4, "main.sleep", "RUNNING", 0x11)},
		stats: map[string]*pb.GetNodeStatsReply{
			hexID(id(0x11)): {Plugins: []*pb.PluginStatus{{Kind: "transport", Name: "tcp", Version: "1.0", State: "RUNNING", Pid: 9}}},
			hexID(id(0x22)): {},
		},
	}
}

type fakeJobs []jobs.Job

func (f fakeJobs) List() []jobs.Job { return f }

// mux collects the routes for an httptest-free server: the real
// dashboard server (token check, public routes, CSRF) on a free port.
func serve(t *testing.T, src Source) *dashboard.Server {
	t.Helper()
	creds, err := auth.New(token, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := dashboard.Listen(dashboard.Options{Port: -1, Auth: creds})
	if err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(10)
	Register(s, Options{Source: src, Auth: creds,
		Jobs: fakeJobs{{SubmissionID: "sub1", Status: jobs.StatusRunning, GorayJobID: hexID(id(0x0a)), BinarySHA256: strings.Repeat("ab", 32), Args: []string{"--long"}, StartTime: &start}}})
	s.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

type client struct {
	t    *testing.T
	hc   *http.Client
	base string
}

func newClient(t *testing.T, base string) *client {
	hc := &http.Client{Transport: &http.Transport{}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(hc.CloseIdleConnections)
	return &client{t: t, hc: hc, base: base}
}

func (c *client) do(method, path, tok string, body io.Reader, hdr map[string]string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestStateAPI(t *testing.T) {
	leaktest.Goroutines(t)
	s := serve(t, newFake())
	c := newClient(t, s.URL())
	for _, tc := range []struct {
		path  string
		code  int
		want  []string
		total int // -1: not checked
	}{
		{"/api/state/nodes", 200, []string{`"name": "head-node"`, `"name": "worker-node"`, `"cpu_used": 3`}, 2},
		{"/api/state/nodes?is_head=true", 200, []string{"head-node"}, 1},
		{"/api/state/jobs", 200, []string{`"submission_id": "sub1"`, `"type": "SUBMISSION"`, `"driver_node_id": "` + hexID(id(0x11))}, 1},
		{"/api/state/actors?state=alive", 200, []string{`"class_name": "main.Counter"`, `"logs_url": "/logs/` + hexID(id(0x22)) + `/worker-` + hexID(id(0x44)) + `.out"`}, 1},
		{"/api/state/actors?state=DEAD", 200, []string{`"rows": []`}, 0},
		{"/api/state/tasks", 200, []string{"main.square", "main.fail"}, 4},
		{"/api/state/tasks?state=FAILED", 200, []string{"main.fail"}, 1},
		{"/api/state/tasks?function=main.square&limit=1", 200, []string{`"truncated": true`}, 2},
		{"/api/state/placement-groups", 200, []string{`"{CPU: 1}@11111111"`}, 1},
		{"/api/state/plugins", 200, []string{`"name": "tcp"`}, 1},
		{"/api/state/summary/tasks", 200, []string{`"key": "main.square"`, `"FINISHED": 2`}, -1},
		{"/api/state/timeline", 200, []string{`"traceEvents"`, `"main.square: execution"`, `head-node`}, -1},
		{"/api/state/timeline?job=" + hexID(id(0x0b)), 200, []string{`"traceEvents": []`}, -1},
		// Bad input: a 400 naming the parameter.
		{"/api/state/tasks?limit=-1", 400, []string{`limit=\"-1\"`, "whole number"}, -1},
		{"/api/state/nodes?limit=abc", 400, []string{`limit=\"abc\"`}, -1},
		{"/api/state/nodes?limit=99999999", 400, []string{"limit", "10000"}, -1},
		{"/api/state/nodes?colour=red", 400, []string{`no field \"colour\"`, "node_id"}, -1},
		{"/api/state/tasks?colour=red", 400, []string{`no field \"colour\"`}, -1},
		{"/api/state/actors?state=ALIVE&state=DEAD", 400, []string{"query parameter state", "give it once"}, -1},
		{"/api/state/summary/tasks?limit=x", 400, []string{"limit"}, -1},
		{"/api/state/timeline?limit=x", 400, []string{"limit"}, -1},
		{"/api/state/workers", 404, []string{`unknown kind \"workers\"`, "placement-groups"}, -1},
		{"/logs/" + hexID(id(0x22)) + "/node.log?tail=x", 400, []string{"tail"}, -1},
		{"/logs/ffff/node.log", 404, []string{"no alive node"}, -1},
		{"/ui/part/bogus", 404, []string{"no such section"}, -1},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, body := c.do("GET", tc.path, token, nil, nil)
			if resp.StatusCode != tc.code {
				t.Fatalf("%d; want %d: %s", resp.StatusCode, tc.code, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("answer lacks %s: %s", w, body)
				}
			}
			if tc.total >= 0 {
				var a struct{ Total int }
				if err := json.Unmarshal([]byte(body), &a); err != nil || a.Total != tc.total {
					t.Errorf("total %d (%v); want %d", a.Total, err, tc.total)
				}
			}
		})
	}
}

func TestPageShowsEverySection(t *testing.T) {
	leaktest.Goroutines(t)
	s := serve(t, newFake())
	c := newClient(t, s.URL())
	resp, body := c.do("GET", "/?state=FINISHED", token, nil, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Security-Policy") == "" {
		t.Fatalf("GET /: %d %v", resp.StatusCode, resp.Header)
	}
	for _, w := range []string{
		`data-part="nodes"`, "head-node", "worker-node", `<span class="tag">head</span>`, `data-pct="75.0"`, // 3 of 4 CPUs
		`data-submission-id="sub1"`, `href="/api/jobs/sub1/logs"`,
		"main.Counter", "counter", "1 / 3", `title="namespace">shop</span>`, `>detached</span>`,
		`data-state="FINISHED"`, `class="phase phase-execution"`, "worker-node", // the timeline's lanes
		`value="FINISHED"`, "{CPU: 1}@11111111", "tcp",
	} {
		if !strings.Contains(body, w) {
			t.Errorf("the page lacks %s", w)
		}
	}
	if strings.Contains(body, "main.fail") && strings.Contains(body, `data-task-id="`+hexID(id(3))+`" data-state="FAILED"`) {
		t.Errorf("the state filter kept a FAILED task in the table")
	}
	// Each section's fragment.
	for _, sec := range Sections {
		resp, body := c.do("GET", "/ui/part/"+sec, token, nil, nil)
		if resp.StatusCode != 200 || strings.Contains(body, "<html") || strings.Contains(body, `class="error"`) {
			t.Errorf("GET /ui/part/%s: %d %s", sec, resp.StatusCode, body)
		}
	}
	// A bad filter shows in the tasks section, the rest of the page stands.
	_, body = c.do("GET", "/?colour=red", token, nil, nil)
	if !strings.Contains(body, `no field &#34;colour&#34;`) || !strings.Contains(body, "head-node") {
		t.Errorf("a bad filter on the page: %s", body)
	}
	// The static assets are served without the token.
	for _, p := range []string{"/static/style.css", "/static/app.js"} {
		if resp, body := c.do("GET", p, "", nil, nil); resp.StatusCode != 200 || len(body) < 100 {
			t.Errorf("GET %s: %d", p, resp.StatusCode)
		}
	}
}

func TestLogin(t *testing.T) {
	leaktest.Goroutines(t)
	s := serve(t, newFake())
	c := newClient(t, s.URL())
	form := func(tok string) io.Reader { return strings.NewReader(url.Values{"token": {tok}}.Encode()) }
	formHdr := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": s.URL()}

	// Without the token, the page sends the browser to the login page,
	// which says how to get the token (not where its file is: the page is
	// public) and shows no data.
	resp, _ := c.do("GET", "/", "", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Fatalf("GET / without the token: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := c.do("GET", "/login", "", nil, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "<code>goray auth token</code>") || strings.Contains(body, "head-node") {
		t.Fatalf("GET /login: %d %s", resp.StatusCode, body)
	}
	// The token file's path is in neither the page nor a refusal.
	_, refusal := c.do("POST", "/login", "", form("nope"), formHdr)
	for _, page := range []string{body, refusal} {
		for _, path := range []string{"/tmp/test-token-file", "auth_token", auth.EnvTokenPath, "--auth-token-file"} {
			if strings.Contains(page, path) {
				t.Errorf("the public login page names the token file (%q):\n%s", path, page)
			}
		}
	}
	for _, tc := range []struct {
		name string
		tok  string
		hdr  map[string]string
		code int
		want string
	}{
		{"wrong token", "nope", formHdr, 401, "not this cluster&#39;s token"},
		{"empty token", "", formHdr, 401, "not this cluster&#39;s token"},
		{"from another site", token, map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example"}, 403, "another site"},
	} {
		resp, body := c.do("POST", "/login", "", form(tc.tok), tc.hdr)
		if resp.StatusCode != tc.code || !strings.Contains(body, tc.want) || len(resp.Cookies()) != 0 {
			t.Errorf("%s: %d %v %s", tc.name, resp.StatusCode, resp.Cookies(), body)
		}
	}
	resp, _ = c.do("POST", "/login", "", form(token), formHdr)
	cks := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cks) != 1 {
		t.Fatalf("login: %d %v", resp.StatusCode, cks)
	}
	ck := cks[0]
	if ck.Name != auth.CookieName || ck.Value != token || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Secure {
		t.Errorf("cookie: %+v", ck)
	}
	// The cookie opens the page and the API.
	cookie := map[string]string{"Cookie": ck.Name + "=" + ck.Value}
	if resp, body := c.do("GET", "/", "", nil, cookie); resp.StatusCode != 200 || !strings.Contains(body, "head-node") {
		t.Errorf("GET / with the cookie: %d", resp.StatusCode)
	}
	if resp, _ := c.do("GET", "/api/state/nodes", "", nil, cookie); resp.StatusCode != 200 {
		t.Errorf("GET /api/state/nodes with the cookie: %d", resp.StatusCode)
	}
	// Another site cannot log the browser out.
	if resp, body := c.do("POST", "/logout", "", nil, map[string]string{"Origin": "http://evil.example"}); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 || !strings.Contains(body, "another site") {
		t.Errorf("logout from another site: %d %v", resp.StatusCode, resp.Cookies())
	}
	// Logout clears it.
	resp, _ = c.do("POST", "/logout", "", nil, map[string]string{"Origin": s.URL()})
	if cks := resp.Cookies(); len(cks) != 1 || cks[0].Name != auth.CookieName || cks[0].MaxAge >= 0 || cks[0].Value != "" {
		t.Errorf("logout: %v", resp.Cookies())
	}
}

// TestEveryRouteNeedsTheToken: only the login page and the static assets
// answer a caller without the token.
func TestEveryRouteNeedsTheToken(t *testing.T) {
	leaktest.Goroutines(t)
	s := serve(t, newFake())
	c := newClient(t, s.URL())
	var paths []string
	for _, k := range Kinds {
		paths = append(paths, "/api/state/"+k)
	}
	for _, sec := range Sections {
		paths = append(paths, "/ui/part/"+sec)
	}
	paths = append(paths, "/api/state/summary/tasks", "/api/state/timeline", "/logs/"+hexID(id(0x11))+"/node.log", "/api/state/", "/nothing")
	for _, p := range paths {
		for _, tok := range []string{"", "wrong"} {
			resp, body := c.do("GET", p, tok, nil, nil)
			if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "head-node") {
				t.Errorf("GET %s with token %q: %d %s", p, tok, resp.StatusCode, body)
			}
			resp, _ = c.do("GET", p, "", nil, map[string]string{"Cookie": auth.CookieName + "=" + tok})
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s with cookie %q: %d", p, tok, resp.StatusCode)
			}
		}
	}
}
