package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/goray-dev/goray/internal/testservers/testbin"
)

// chromiumPath finds the browser the dashboard test drives: $GORAY_CHROMIUM,
// else chromium or chromium-browser on $PATH (Debian's chromium package,
// which `make chromium` installs).
func chromiumPath(t *testing.T) string {
	t.Helper()
	p, err := testbin.Find(testbin.Spec{What: "chromium", Env: "GORAY_CHROMIUM", Commands: []string{"chromium", "chromium-browser"},
		Install: "run `make chromium` (it installs Debian's chromium package)"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// artifactDir is where the test keeps its screenshots:
// $GORAY_TEST_ARTIFACTS/<sub>, else <repo>/.artifacts/<sub>.
func artifactDir(t *testing.T, sub string) string {
	t.Helper()
	base := os.Getenv("GORAY_TEST_ARTIFACTS")
	if base == "" {
		root, err := filepath.Abs("..")
		if err != nil {
			t.Fatal(err)
		}
		base = filepath.Join(root, ".artifacts")
	}
	dir := filepath.Join(base, sub)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser is a headless Chromium with its own profile, driven over the
// DevTools protocol (chromedp).
type browser struct {
	t       *testing.T
	ctx     context.Context
	profile string
	shots   string
}

// startBrowser starts Chromium with a temp user-data-dir, and HOME and
// TMPDIR in that dir too (its crash handler's database and its temp files
// go there, not in the user's home or the tests' TMPDIR); when the test
// ends it is closed and the test checks that no process of it is left
// (every one has the profile dir in its environment: the crash handlers
// Chromium starts name neither it nor the browser on their command line).
func startBrowser(t *testing.T, ctx context.Context) *browser {
	t.Helper()
	dir := shortTempDir(t)
	profile, home, tmp := filepath.Join(dir, "profile"), filepath.Join(dir, "home"), filepath.Join(dir, "tmp")
	for _, d := range []string{profile, home, tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	marker := "GORAY_TEST_BROWSER=" + dir
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.UserDataDir(profile),
		chromedp.Env(marker, "HOME="+home, "TMPDIR="+tmp, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "XDG_CACHE_HOME="+filepath.Join(home, ".cache")),
		chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-proxy-server", true),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	b := &browser{t: t, ctx: bctx, profile: profile, shots: artifactDir(t, "dashboard")}
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc() // kills Chromium and waits for it
		waitNoProcs(t, 20*time.Second, "Chromium processes of "+dir, func(p proc) bool { return p.hasEnv(marker) || p.mentions(dir) })
	})
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", chromiumPath(t), err)
	}
	return b
}

// run runs steps with a deadline.
func (b *browser) run(d time.Duration, steps ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	return chromedp.Do(ctx, steps...)
}

// eval evaluates a JavaScript expression on the page (awaiting the
// promise it returns, if it does).
func eval[T any](b *browser, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// waitEval polls expr until it is true.
func (b *browser) waitEval(d time.Duration, what, expr string) {
	b.t.Helper()
	var last error
	d = max(d, minWait)
	deadline := time.Now().Add(d)
	for {
		ok, err := eval[bool](b, expr)
		if last = err; err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.screenshot("timeout")
			b.t.Fatalf("timed out after %s waiting for the page to show %s (%s; last error %v)", d, what, expr, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// screenshot saves a full-page PNG and logs where.
func (b *browser) screenshot(name string) {
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot: %s", path)
}

// TestDashboard starts a head and one more node, runs a known workload
// (the quickstart as a finished job, and a held job with an actor and a
// running task on the other node), and checks the dashboard in headless
// Chromium: a browser without the token gets the login page and no data;
// after logging in with the token the page shows both nodes, the running
// job, the actor and the tasks in the timeline, and keeps them live.
func TestDashboard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h := startHead(t, ctx, "--num-cpus", "2", "--node-name", "dash-head")
	worker := joinNode(t, ctx, h, "127.0.0.2", "", "--node-name", "dash-worker")
	var info struct {
		DashboardAddress string `json:"dashboard_address"`
	}
	b, err := os.ReadFile(filepath.Join(h.session, "node.json"))
	if err != nil || json.Unmarshal(b, &info) != nil || info.DashboardAddress == "" {
		t.Fatalf("node.json dashboard_address: %q (%v)\n%s", info.DashboardAddress, err, b)
	}
	url := "http://" + info.DashboardAddress
	local := []string{"--temp-dir", h.tempDir}

	// The workload: a job that ran tasks and finished, then a long job
	// with an actor and a blocking task on the other node.
	r := runGoray(t, ctx, append(append([]string{"job", "submit", "--wait", "--submission-id", "dash-quick"}, local...), "--", quickstartBin)...)
	if r.code != 0 {
		t.Fatalf("goray job submit --wait quickstart: %s", r)
	}
	r = runGoray(t, ctx, append(append([]string{"job", "submit", "--no-wait", "--submission-id", "dash-hold"}, local...), "--", testjobBin, "job-hold", worker.id)...)
	if r.code != 0 {
		t.Fatalf("goray job submit --no-wait job-hold: %s", r)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		runGoray(t, ctx, append([]string{"job", "stop", "--wait", "dash-hold"}, local...)...)
	})
	waitFor(t, 90*time.Second, "the held job to be ready", func() bool {
		r := runGoray(t, ctx, append([]string{"job", "logs", "dash-hold"}, local...)...)
		return strings.Contains(r.stdout, "job-hold: ready")
	})
	type actorRow struct {
		ActorID string `json:"actor_id"`
		State   string `json:"state"`
	}
	var actor actorRow
	for _, a := range list[actorRow](h, ctx, "actors") {
		if a.State == "ALIVE" {
			actor = a
		}
	}
	if actor.ActorID == "" {
		t.Fatal("goray list actors shows no ALIVE actor under the held job")
	}
	// The tasks the timeline must draw: the finished ones whose worker
	// reported their execution.
	type taskRow struct {
		TaskID string `json:"task_id"`
		State  string `json:"state"`
		Phases []struct {
			Phase string `json:"phase"`
		} `json:"phases"`
	}
	var executed []string
	waitFor(t, 30*time.Second, "the quickstart's tasks FINISHED with their execution in goray list tasks (task events arrive in batches)", func() bool {
		executed = executed[:0]
		for _, tk := range list[taskRow](h, ctx, "tasks") {
			for _, ph := range tk.Phases {
				if tk.State == "FINISHED" && ph.Phase == "execution" {
					executed = append(executed, tk.TaskID)
				}
			}
		}
		return len(executed) >= 3
	})

	// Without the token the state API refuses, and the browser gets the
	// login page and no data.
	resp, err := http.Get(url + "/api/state/nodes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /api/state/nodes without the token: %d, want 401", resp.StatusCode)
	}
	br := startBrowser(t, ctx)
	if err := br.run(30*time.Second, chromedp.Navigate(url+"/"), chromedp.WaitVisible(chromedp.ID("login"))); err != nil {
		t.Fatalf("opening the dashboard without the token: %v", err)
	}
	if loc, err := eval[string](br, `location.pathname`); err != nil || loc != "/login" {
		t.Fatalf("without the token the browser is at %q (%v), want /login", loc, err)
	}
	if rows, err := eval[int](br, `document.querySelectorAll("tr.node, tr.job, tr.actor, svg.timeline").length`); err != nil || rows != 0 {
		t.Fatalf("the login page shows %d elements of data (%v)", rows, err)
	}
	if apiCode, err := eval[int](br, `fetch("/api/state/nodes").then(r => r.status)`); err != nil || apiCode != http.StatusUnauthorized {
		t.Fatalf("the browser's fetch of /api/state/nodes without the token: %d (%v), want 401", apiCode, err)
	}
	br.screenshot("login")

	// A wrong token is refused on the page.
	if err := br.run(20*time.Second,
		chromedp.SendKeys(chromedp.ID("token"), "not-the-token"),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("login-error"))); err != nil {
		t.Fatalf("logging in with a wrong token: %v", err)
	}
	// The token logs in.
	if err := br.run(30*time.Second,
		chromedp.SetValue(chromedp.ID("token"), readToken(t)),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("nodes"))); err != nil {
		t.Fatalf("logging in with the token: %v", err)
	}

	// Both nodes, alive, with their bars.
	br.waitEval(30*time.Second, "both nodes alive",
		fmt.Sprintf(`document.querySelectorAll('tr.node[data-state="ALIVE"]').length === 2 && !!document.querySelector('tr.node[data-node-id=%q]') && document.body.innerText.includes("dash-head") && document.body.innerText.includes("dash-worker")`, worker.id))
	// The running job, and the finished one.
	br.waitEval(30*time.Second, "the running job",
		`!!document.querySelector('tr.job[data-submission-id="dash-hold"][data-status="RUNNING"]') && !!document.querySelector('tr.job[data-submission-id="dash-quick"][data-status="SUCCEEDED"]')`)
	// The actor, alive on the worker node, with its log link.
	br.waitEval(30*time.Second, "the actor",
		fmt.Sprintf(`(() => { const r = document.querySelector('tr.actor[data-actor-id=%q]'); return !!r && r.dataset.state === "ALIVE" && r.innerText.includes(%q) && !!r.querySelector('a[href^="/logs/"]') })()`, actor.ActorID, worker.id[:8]))
	// The task counts and the timeline with the finished tasks.
	br.waitEval(30*time.Second, "the task counts", `!!document.querySelector('.counts .count[data-state="FINISHED"]')`)
	ids, _ := json.Marshal(executed)
	br.waitEval(30*time.Second, "the finished tasks in the timeline",
		fmt.Sprintf(`%s.every(id => !!document.querySelector('svg.timeline rect.phase-execution[data-task-id="' + id + '"]'))`, ids))
	// The page refreshes itself.
	n0, err := eval[int](br, `Number(document.body.dataset.refreshed || 0)`)
	if err != nil {
		t.Fatal(err)
	}
	br.waitEval(30*time.Second, "two refreshes", fmt.Sprintf(`Number(document.body.dataset.refreshed || 0) >= %d`, n0+2))
	br.screenshot("dashboard")

	// The actor's log link serves its worker's stdout.
	logText, err := eval[string](br, fmt.Sprintf(`fetch(document.querySelector('tr.actor[data-actor-id=%q] a').href).then(r => r.status + " " + r.headers.get("content-type"))`, actor.ActorID))
	if err != nil || !strings.HasPrefix(logText, "200 text/plain") {
		t.Errorf("the actor's log link: %q (%v)", logText, err)
	}

	// Log out: back to the login page, no data.
	if err := br.run(20*time.Second, chromedp.Click(chromedp.CSS(".logout button")), chromedp.WaitVisible(chromedp.ID("login"))); err != nil {
		t.Fatalf("logging out: %v", err)
	}
	if err := br.run(20*time.Second, chromedp.Navigate(url+"/"), chromedp.WaitVisible(chromedp.ID("login"))); err != nil {
		t.Fatalf("the page after logging out: %v", err)
	}
}

// TestDocDashboard runs the walk-through of docs/dashboard.md: a head, the
// quickstart against it, then the state API with curl, refused without
// the token and answering with it.
func TestDocDashboard(t *testing.T) {
	d := newDocRun(t, testCtxFor(t, 3*time.Minute))
	out := d.runBlock("", "docs/dashboard.md", "goray start --head --port 6380 --dashboard-port 8265", 0)
	wantLines(t, out[0].stdout, "dashboard:", "http://127.0.0.1:")
	wantLines(t, out[1].stdout, "all checks passed")
	if got := strings.TrimSpace(out[2].stdout); got != "401" {
		t.Errorf("the state API without the token answered %q, want 401", got)
	}
	var rep struct {
		Tasks []struct {
			State    string `json:"state"`
			Function string `json:"function"`
		} `json:"rows"`
		Total     int  `json:"total"`
		Truncated bool `json:"truncated"`
	}
	if err := json.Unmarshal([]byte(out[3].stdout), &rep); err != nil {
		t.Fatalf("the state API's answer: %v\n%s", err, out[3].stdout)
	}
	if len(rep.Tasks) != 3 || rep.Total <= 3 || !rep.Truncated {
		t.Errorf("%d tasks of %d (truncated %v), want the 3 newest of more:\n%s", len(rep.Tasks), rep.Total, rep.Truncated, out[3].stdout)
	}
	for _, tk := range rep.Tasks {
		if tk.State != "FINISHED" || !strings.HasPrefix(tk.Function, "main.") {
			t.Errorf("task %+v, want a FINISHED task of the quickstart", tk)
		}
	}
	d.checkNothingLeft()
}
