package acceptance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/testservers/miniotest"
)

// The documented commands: every shell block of README.md, docs/*.md and
// the examples' READMEs, and every block of commands in the examples' doc
// comments, is run by a test here exactly as written, from the repository
// root, in the environment the document says. documented names the test of
// each block; TestDocCommandsCovered fails on a block or command that no
// test runs and that is not listed with the reason why.
//
// What a test changes, and only that: a fixed port of a cluster walk-
// through (6380, 6379, the dashboard's 8265, also where a head takes it by
// default: $GORAY_DASHBOARD_PORT) becomes a free one (docRun.run), so that tests and
// other users' clusters on the machine never collide; the MinIO of the S3
// walk-through is the same pinned server started by internal/testservers/miniotest on a
// free port, and the AWS variables the documents export get that server's
// values (TestDocSpillS3). Every command runs with a $TMPDIR of its test
// (so `goray stop` stops only the test's nodes, whose temp dir is
// $TMPDIR/goray), the tests' cluster token file ($GORAY_AUTH_TOKEN_PATH,
// which README.md's Security section names; never the user's ~/.goray), and
// `goray` on $PATH as `go install ./cmd/goray` puts it there (the binary
// TestMain built from ./cmd/goray).

// docEntry is one shell block of a document and the test that runs it.
type docEntry struct {
	// file is the document, relative to the repository root.
	file string
	// first is the block's first command; nth tells blocks of the file
	// with the same first command apart (0 is the first).
	first string
	nth   int
	// test runs every command of the block but those in skip.
	test string
	// skip holds the commands no test runs, and why.
	skip map[string]string
}

// Why the commands no test runs are not run.
const (
	whyFullBench = "a full microbenchmark run takes minutes; make test runs `goray microbenchmark --quick` (bench-smoke), TestDocMicrobenchmark the quick filtered run"
	whyGoTest    = "the package's own tests, which make test runs (go test ./...)"
)

var documented = []docEntry{
	{file: "README.md", first: "go run ./examples/quickstart", test: "TestDocQuickstart", skip: map[string]string{"make test": "it is the test suite itself"}},
	{file: "examples/quickstart/main.go", first: "go run ./examples/quickstart", test: "TestDocQuickstart"},
	{file: "README.md", first: "go run ./cmd/goray start --head --port 6380", test: "TestDocClusterWalkthrough"},
	{file: "examples/cluster/main.go", first: "goray start --head --port 6379", test: "TestDocClusterWalkthrough"},
	{file: "README.md", first: "go run ./cmd/goray start --head --port 6380", nth: 1, test: "TestDocStartedNode"},
	{file: "README.md", first: "go run ./cmd/goray start --head --port 6380 --num-cpus 2", test: "TestDocPlacementGroup"},
	{file: "examples/placement-group/main.go", first: "goray start --head --port 6379 --num-cpus 2", test: "TestDocPlacementGroup"},
	{file: "examples/detached/main.go", first: "goray start --head --port 6379", test: "TestDocDetached"},
	{file: "docs/detached.md", first: "goray start --head --port 6379", test: "TestDocDetached"},
	{file: "examples/concurrency-groups/main.go", first: "go run ./examples/concurrency-groups", test: "TestDocConcurrencyGroups"},
	{file: "docs/concurrency-groups.md", first: "go run ./examples/concurrency-groups", test: "TestDocConcurrencyGroups"},
	{file: "docs/concurrency-groups.md", first: "goray start --head --port 6379", test: "TestDocConcurrencyGroups"},
	{file: "examples/actor-retries/main.go", first: "go run ./examples/actor-retries", test: "TestDocActorTaskRetries"},
	{file: "docs/actor-task-retries.md", first: "go run ./examples/actor-retries", test: "TestDocActorTaskRetries"},
	{file: "docs/actor-task-retries.md", first: "goray start --head --port 6379", test: "TestDocActorTaskRetries"},
	{file: "examples/generators/main.go", first: "go run ./examples/generators", test: "TestDocGenerators"},
	{file: "docs/generators.md", first: "go run ./examples/generators", test: "TestDocGenerators"},
	{file: "docs/generators.md", first: "goray start --head --port 6379", test: "TestDocGenerators"},
	{file: "examples/memory/main.go", first: "go run ./examples/memory", test: "TestDocMemoryExample"},
	{file: "docs/memory.md", first: "go run ./examples/memory", test: "TestDocMemoryExample"},
	{file: "examples/autoscale/main.go", first: "make plugins", test: "TestDocAutoscale"},
	{file: "README.md", first: "make plugins minio", test: "TestDocSpillS3"},
	{file: "examples/spill-s3/main.go", first: "make plugins", test: "TestDocSpillS3"},
	{file: "examples/allreduce/main.go", first: "make plugins", test: "TestDocTransportExamples"},
	{file: "examples/weight-sync/main.go", first: "make plugins", test: "TestDocTransportExamples"},
	{file: "README.md", first: "goray cert ca --dir certs", test: "TestDocCerts"},
	{file: "docs/security.md", first: "goray cert ca --dir certs", test: "TestDocCerts"},
	{file: "docs/jobs.md", first: "goray start --head --port 6380 --dashboard-port 8265", test: "TestDocJobs"},
	{file: "docs/state.md", first: "goray start --head --port 6380", test: "TestDocState"},
	{file: "docs/logs.md", first: "goray start --head --port 6380", test: "TestDocLogs"},
	{file: "docs/dashboard.md", first: "goray start --head --port 6380 --dashboard-port 8265", test: "TestDocDashboard"},
	{file: "docs/scale.md", first: "goray scale --nodes 20 --duration 1s --events 2 --json bin/scale-quick.json", test: "TestDocScale"},
	{file: "docs/benchmarks.md", first: "make bench", test: "TestDocMicrobenchmark", skip: map[string]string{
		"make bench":                        "it rewrites docs/benchmarks.md from a full run, which takes minutes",
		"go run ./cmd/goray microbenchmark": whyFullBench,
		"go run ./cmd/goray microbenchmark --address 127.0.0.1:6380": whyFullBench,
	}},
	{file: "docs/benchmarks.md", first: "make bench-compare BASE=HEAD RUNS=2 QUICK=1 FILTER='^single_client_tasks_async$'", test: "TestDocBenchCompare", skip: map[string]string{
		"make bench-compare BASE=HEAD~3":                                 "two full microbenchmark runs of each side take half an hour",
		"make bench-compare BASE=main RUNS=5 FILTER='actor_calls|tasks'": "ten filtered microbenchmark runs take many minutes",
	}},
	{file: "docs/plugins.md", first: "goray plugins install github.com/goray-dev/goray/plugins/shm@latest", test: "TestDocPluginsInstall"},
	{file: "docs/writing-a-transport.md", first: "go build -o bin/plugins/goray-transport-tcp-template ./examples/transport-template", test: "TestDocTransportTemplate"},
	{file: "docs/writing-a-transport.md", first: "make pyplugin", test: "TestDocPythonTransport"},
	{file: "sdk/python/README.md", first: "make pyplugin", test: "TestDocPythonTransport", skip: map[string]string{
		"go test ./sdk/python/pythontest/": whyGoTest,
	}},
	{file: "examples/transport-template/README.md", first: "go build -o bin/plugins/goray-transport-tcp-template ./examples/transport-template", test: "TestDocTransportTemplate"},
	{file: "examples/transport-template/README.md", first: "goray plugins check bin/plugins/goray-transport-tcp-template", test: "TestDocTransportTemplate"},
	{file: "examples/transport-template/README.md", first: "goray start --head --port 6380 --config examples/transport-template/node.hcl", test: "TestDocTransportTemplate"},
	{file: "examples/transport-template/README.md", first: "go test ./examples/transport-template/...", skip: map[string]string{
		"go test ./examples/transport-template/...":       whyGoTest,
		"go test -race ./examples/transport-template/...": whyGoTest + " (without -race)",
	}},
}

// docBlock is one block of shell commands in a document.
type docBlock struct {
	file string // relative to the repository root
	line int    // of the block's first line
	// cmds are its commands, without comments and blank lines, continued
	// lines joined.
	cmds []string
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// repoRoot is the repository root.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// docFiles lists the documents whose commands are run: README.md,
// docs/*.md, and every README and non-test Go file under examples/.
func docFiles(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	files := []string{"README.md", "sdk/python/README.md"}
	mds, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, m := range mds {
		files = append(files, filepath.Join("docs", filepath.Base(m)))
	}
	err := filepath.WalkDir(filepath.Join(root, "examples"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := d.Name()
		if strings.HasPrefix(name, "README") || (strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")) {
			rel, _ := filepath.Rel(root, path)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// docBlocks returns the shell blocks of a document: the ```sh fences of a
// Markdown file (indented ones too), or the blocks of a Go file's comments
// indented by a tab whose first line is a command.
func docBlocks(t *testing.T, file string) []docBlock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), file))
	if err != nil {
		t.Fatal(err)
	}
	var out []docBlock
	var cur *docBlock
	var raw []string
	flush := func() {
		if cur != nil {
			if cur.cmds = shellCommands(raw); len(cur.cmds) > 0 {
				out = append(out, *cur)
			}
		}
		cur, raw = nil, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasSuffix(file, ".go") {
			body, ok := strings.CutPrefix(line, "//\t")
			switch {
			case ok && cur != nil:
				raw = append(raw, body)
			case ok && isCommand(body):
				cur, raw = &docBlock{file: file, line: n}, []string{body}
			default:
				flush()
			}
			continue
		}
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && (trimmed == "```sh" || trimmed == "```bash" || trimmed == "```shell"):
			cur = &docBlock{file: file, line: n + 1}
		case cur != nil && trimmed == "```":
			flush()
		case cur != nil:
			raw = append(raw, trimmed)
		}
	}
	flush()
	return out
}

// isCommand reports whether a doc comment line is a shell command: its
// first word, after variable assignments, is one of the commands the
// documents use.
func isCommand(line string) bool {
	for _, w := range strings.Fields(line) {
		if name, _, ok := strings.Cut(w, "="); ok && name != "" && strings.ToUpper(name) == name {
			continue // NAME=value before the command
		}
		return slices.Contains([]string{"go", "goray", "make", "export"}, w)
	}
	return false
}

// shellCommands drops blank lines and comments and joins continued lines.
func shellCommands(lines []string) []string {
	var out []string
	var pending string
	for _, l := range lines {
		l = strings.TrimSpace(stripComment(l))
		if c, ok := strings.CutSuffix(l, `\`); ok {
			pending += strings.TrimSpace(c) + " "
			continue
		}
		l = strings.TrimSpace(pending + l)
		pending = ""
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// stripComment cuts a shell comment (a # at a word's start, outside
// quotes) off a line.
func stripComment(l string) string {
	var quote rune
	for i, r := range l {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return l[:i]
		}
	}
	return l
}

// entryOf returns the index in documented of the nth block of file whose
// first command is first, or -1.
func entryOf(file, first string, nth int) int {
	return slices.IndexFunc(documented, func(e docEntry) bool { return e.file == file && e.first == first && e.nth == nth })
}

// TestDocCommandsCovered: every command of every shell block of the
// documents is run by the test documented names, or listed there with the
// reason it is not; and every entry there still names a block.
func TestDocCommandsCovered(t *testing.T) {
	used := make([]bool, len(documented))
	for _, file := range docFiles(t) {
		seen := map[string]int{}
		for _, b := range docBlocks(t, file) {
			nth := seen[b.cmds[0]]
			seen[b.cmds[0]]++
			i := entryOf(file, b.cmds[0], nth)
			if i < 0 {
				t.Errorf("%s: no test runs this block of commands (add it to documented): %q", b, b.cmds)
				continue
			}
			used[i] = true
			for _, c := range b.cmds {
				if documented[i].test == "" && documented[i].skip[c] == "" {
					t.Errorf("%s: no test runs %q and documented does not say why", b, c)
				}
			}
			for c := range documented[i].skip {
				if !slices.Contains(b.cmds, c) {
					t.Errorf("%s: documented skips %q, which the block does not say any more", b, c)
				}
			}
		}
	}
	for i, e := range documented {
		if !used[i] {
			t.Errorf("documented names block %d of %s starting %q, which is not there any more", e.nth, e.file, e.first)
		}
	}
}

// docRun runs documented commands as a user would, in the environment of
// one shell session.
type docRun struct {
	t    *testing.T
	ctx  context.Context
	root string
	// tmp is the commands' $TMPDIR: their nodes' temp dir is tmp/goray.
	tmp string
	env []string
	// ports maps each fixed port of the documents to a free one.
	ports *strings.Replacer
	// exported are the variables the documents' export commands set, as
	// written; override replaces some (the S3 test's MinIO).
	exported, override map[string]string
	// replace runs instead of a command that contains its key.
	replace map[string]func()
	// ran are the commands run so far, not run again (two documents say
	// the same).
	ran map[string]bool
}

// makeOnce runs each `make` command of the documents once per test binary:
// its targets (the plugins) are the same for every document.
var makeOnce sync.Map // command → *onceResult

type onceResult struct {
	once sync.Once
	r    cliResult
}

// newDocRun prepares a session with a $TMPDIR of its own. Its nodes are
// stopped, its processes killed and the dir removed when the test ends.
func newDocRun(t *testing.T, ctx context.Context) *docRun {
	t.Helper()
	d := &docRun{t: t, ctx: ctx, root: repoRoot(t), tmp: shortestTempDir(t),
		exported: map[string]string{}, override: map[string]string{}, replace: map[string]func(){}, ran: map[string]bool{}}
	bin := filepath.Join(d.tmp, "bin")
	if err := os.Mkdir(bin, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(gorayBin, filepath.Join(bin, "goray")); err != nil {
		t.Fatal(err)
	}
	for _, kv := range baseEnv() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "TMPDIR" || name == "PATH" || strings.HasPrefix(name, "AWS_"):
		case name == "MAKEFLAGS" || name == "MFLAGS" || name == "MAKELEVEL": // not the outer make's jobserver
		default:
			d.env = append(d.env, kv)
		}
	}
	d.env = append(d.env, "TMPDIR="+d.tmp, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	var pairs []string
	for _, fixed := range []string{"6380", "6379"} {
		p := strconv.Itoa(freePort(t))
		pairs = append(pairs, ":"+fixed, ":"+p, "--port "+fixed, "--port "+p)
	}
	// The dashboard's default port too (docs/jobs.md).
	dash := strconv.Itoa(freePort(t))
	pairs = append(pairs, ":8265", ":"+dash, "--dashboard-port 8265", "--dashboard-port "+dash)
	// A head a document starts without --dashboard-port takes that port
	// too (its default, 8265, may be another test's or user's).
	d.env = append(d.env, "GORAY_DASHBOARD_PORT="+dash)
	d.ports = strings.NewReplacer(pairs...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := os.Stat(filepath.Join(d.tmp, "goray")); err == nil {
			runGoray(t, ctx, "stop", "--temp-dir", filepath.Join(d.tmp, "goray"), "--force")
		}
		for _, p := range findProcs(func(p proc) bool { return p.mentions(d.tmp) }) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	return d
}

// shortestTempDir makes a temp dir with a name as short as can be: the
// commands' nodes keep their sessions, and the plugins' unix sockets
// (limited to 107 bytes), under $TMPDIR/goray/session_<time>_<pid>. It is
// removed when the test ends.
func shortestTempDir(t *testing.T) string {
	t.Helper()
	for i := 0; ; i++ {
		d := filepath.Join(os.TempDir(), "d"+strconv.Itoa(i))
		err := os.Mkdir(d, 0o700)
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
		if !errors.Is(err, fs.ErrExist) {
			t.Fatal(err)
		}
	}
}

// runBlock runs every command of the block of file that documented gives
// this test, but those it skips, from the repository root (or dir, when
// not empty), failing the test at the first that does not exit 0. It
// returns what each did, in order.
func (d *docRun) runBlock(dir, file, first string, nth int) []cliResult {
	d.t.Helper()
	test, _, _ := strings.Cut(d.t.Name(), "/")
	i := entryOf(file, first, nth)
	if i < 0 || documented[i].test != test {
		d.t.Fatalf("documented gives %s no block %d of %s starting %q", test, nth, file, first)
	}
	var b *docBlock
	for _, x := range docBlocks(d.t, file) {
		if x.cmds[0] == first {
			if nth == 0 {
				b = &x
				break
			}
			nth--
		}
	}
	if b == nil {
		d.t.Fatalf("%s has no shell block starting %q any more", file, first)
	}
	var out []cliResult
	for _, c := range b.cmds {
		if why := documented[i].skip[c]; why != "" {
			d.t.Logf("%s: $ %s\n  (not run: %s)", b, c, why)
			continue
		}
		out = append(out, d.run(dir, c))
	}
	return out
}

// run runs one command with bash and fails the test unless it exits 0.
// Its one change: a fixed port becomes the session's free one.
func (d *docRun) run(dir, command string) cliResult {
	d.t.Helper()
	for key, f := range d.replace {
		if strings.Contains(command, key) {
			d.t.Logf("$ %s\n  (not run: the test does this itself)", command)
			f()
			return cliResult{}
		}
	}
	if rest, ok := strings.CutPrefix(command, "export "); ok {
		d.export(rest)
		return cliResult{}
	}
	if strings.HasPrefix(command, "make ") {
		o, _ := makeOnce.LoadOrStore(command, &onceResult{})
		or := o.(*onceResult)
		or.once.Do(func() { or.r = d.exec(dir, command) })
		if or.r.code != 0 {
			d.t.Fatalf("$ %s\n%s", command, or.r)
		}
		return or.r
	}
	if d.ran[command] {
		d.t.Logf("$ %s\n  (ran already in this test)", command)
		return cliResult{}
	}
	r := d.exec(dir, d.ports.Replace(command))
	if r.code != 0 {
		d.t.Fatalf("$ %s\n%s", command, r)
	}
	d.ran[command] = true
	return r
}

// exec runs command with bash and returns what it did.
func (d *docRun) exec(dir, command string) cliResult {
	d.t.Helper()
	if dir == "" {
		dir = d.root
	}
	cmd := exec.CommandContext(d.ctx, "bash", "-c", command)
	cmd.Dir = dir
	cmd.Env = slices.Clone(d.env)
	for name, v := range d.exported {
		if o, ok := d.override[name]; ok {
			v = o
		}
		cmd.Env = append(cmd.Env, name+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		r.code = -1
		r.stderr += "\n" + err.Error()
	}
	d.t.Logf("$ %s   (%s, exit %d)", command, time.Since(start).Round(100*time.Millisecond), r.code)
	return r
}

// export records the NAME=value words of an export command (plain words:
// the documents quote none).
func (d *docRun) export(words string) {
	d.t.Helper()
	for _, w := range strings.Fields(words) {
		name, v, ok := strings.Cut(w, "=")
		if !ok || strings.ContainsAny(v, `"'$`) {
			d.t.Fatalf("export %s: %q is not NAME=value", words, w)
		}
		d.exported[name] = v
		if o, ok := d.override[name]; ok {
			v = o
		}
		d.t.Logf("$ export %s=%s", name, v)
	}
}

// checkNothingLeft fails when a process of the session still runs or its
// temp dir holds more than the nodes' logs, the binary cache and the GCS's
// data directory.
func (d *docRun) checkNothingLeft() {
	d.t.Helper()
	waitNoProcs(d.t, 10*time.Second, "processes of "+d.tmp, func(p proc) bool { return p.mentions(d.tmp) })
	_ = filepath.WalkDir(d.tmp, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(d.tmp, path)
		switch {
		case e.IsDir() || rel == "bin/goray" || rel == "goray/session_latest":
		case strings.HasPrefix(rel, "goray/session_") && strings.Contains(rel, "/logs/"):
		case strings.HasPrefix(rel, "goray/binaries/"):
		case strings.HasPrefix(rel, "goray/data/"): // the GCS's storage outlives sessions by design
		case strings.HasPrefix(rel, "goray-local/") && e.Type()&fs.ModeSocket == 0: // the local provider's state, by design
		default:
			d.t.Errorf("%s is left after the documented commands", path)
		}
		return nil
	})
}

// testCtxFor is testCtx with another bound, for tests that build with go
// run and start clusters.
func testCtxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestDocQuickstart runs the quick start of README.md and the quickstart
// example's doc: `go run ./examples/quickstart` passes every check on an
// embedded node and leaves nothing in $TMPDIR.
func TestDocQuickstart(t *testing.T) {
	d := newDocRun(t, testCtxFor(t, 3*time.Minute))
	out := d.runBlock("", "README.md", "go run ./examples/quickstart", 0)
	d.runBlock("", "examples/quickstart/main.go", "go run ./examples/quickstart", 0)
	wantLines(t, out[0].stdout+out[0].stderr, "goray is running on an embedded node", "all checks passed")
	d.checkNothingLeft()
}

// TestDocClusterWalkthrough runs the cluster walk-throughs of README.md
// and of the cluster example's doc: two nodes on one machine, the example
// on both, and `goray stop` leaves nothing running.
func TestDocClusterWalkthrough(t *testing.T) {
	for _, c := range []struct{ name, file, first string }{
		{"readme", "README.md", "go run ./cmd/goray start --head --port 6380"},
		{"example", "examples/cluster/main.go", "goray start --head --port 6379"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDocRun(t, testCtxFor(t, 3*time.Minute))
			out := d.runBlock("", c.file, c.first, 0)
			wantLines(t, out[2].stdout+out[2].stderr, "cluster: 2 alive nodes", "OK")
			wantLines(t, out[3].stdout, "Stopped goray head node", "Stopped goray node")
			d.checkNothingLeft()
		})
	}
}

// TestDocPlacementGroup runs the placement group walk-throughs of README.md
// and of the example's doc: three nodes on one machine, the example's
// STRICT_SPREAD gang (a bundle on each node) and PACK group, the groups
// listed, and `goray stop` leaves nothing running.
func TestDocPlacementGroup(t *testing.T) {
	for _, c := range []struct{ name, file, first string }{
		{"readme", "README.md", "go run ./cmd/goray start --head --port 6380 --num-cpus 2"},
		{"example", "examples/placement-group/main.go", "goray start --head --port 6379 --num-cpus 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDocRun(t, testCtxFor(t, 4*time.Minute))
			out := d.runBlock("", c.file, c.first, 0)
			run := out[3].stdout + out[3].stderr
			wantLines(t, run, "cluster: 3 alive nodes; gang of 3", "gang exchange: 3 members", "PACK bundles share a node: ok",
				"resources free again after removal: ok", "OK")
			nodes := map[string]bool{}
			for _, l := range strings.Split(run, "\n") {
				if strings.HasPrefix(l, "STRICT_SPREAD bundle ") {
					nodes[l[strings.LastIndex(l, " ")+1:]] = true
				}
			}
			if len(nodes) != 3 {
				t.Errorf("STRICT_SPREAD bundles on %d distinct nodes, want 3:\n%s", len(nodes), run)
			}
			wantLines(t, out[4].stdout, "PLACEMENT GROUP ID", "STRICT_SPREAD", "PACK", "REMOVED")
			wantLines(t, out[5].stdout, "Stopped goray head node")
			d.checkNothingLeft()
		})
	}
}

// TestDocAutoscale runs the autoscale example's walk-through: goray up on
// the local provider, the burst that grows the cluster and the wait until
// it shrinks back, status, goray down.
func TestDocAutoscale(t *testing.T) {
	d := newDocRun(t, testCtxFor(t, 5*time.Minute))
	out := d.runBlock("", "examples/autoscale/main.go", "make plugins", 0)
	wantLines(t, out[1].stdout, "Started goray head node", `Cluster "autoscale-demo": provider "local"`)
	run := out[2].stdout + out[2].stderr
	wantLines(t, run, "submitting 12 tasks", "worker node", "all 12 results are right", "the workers are gone", "OK")
	wantLines(t, out[3].stdout, "Autoscaler of cluster autoscale-demo")
	wantLines(t, out[4].stdout, `Stopped the head of cluster "autoscale-demo"`)
	d.checkNothingLeft()
}

// TestDocStartedNode runs README.md's quickstart against a node started by
// hand: start, the example, status, stop.
func TestDocStartedNode(t *testing.T) {
	d := newDocRun(t, testCtxFor(t, 3*time.Minute))
	out := d.runBlock("", "README.md", "go run ./cmd/goray start --head --port 6380", 1)
	wantLines(t, out[0].stdout, "Started goray head node")
	wantLines(t, out[1].stdout+out[1].stderr, "goray is running on the cluster at", "all checks passed")
	wantLines(t, out[2].stdout, "1 node alive")
	wantLines(t, out[3].stdout, "Stopped goray head node")
	d.checkNothingLeft()
}

// TestDocSpillS3 runs the S3 walk-through of README.md and the spill-s3
// example's doc against the pinned MinIO: the example's embedded node,
// configured by the example's HCL file alone (it has no head block), spills
// to a bucket it creates and reads every value back.
func TestDocSpillS3(t *testing.T) {
	ctx := testCtxFor(t, 5*time.Minute)
	d := newDocRun(t, ctx)
	checkMinioLine(t, "README.md", "make plugins minio", "examples/spill-s3/main.go", "make plugins")
	// README.md starts a MinIO on 127.0.0.1:9000 with its own credentials;
	// the test starts the same pinned server on a free port with random
	// ones, and the AWS variables the documents export get its values.
	var srv *miniotest.Server
	d.replace[".tools/minio server"] = func() {
		srv = miniotest.Start(t)
		d.override["AWS_ENDPOINT_URL"] = "http://" + srv.Endpoint
		d.override["AWS_ACCESS_KEY_ID"] = srv.AccessKey
		d.override["AWS_SECRET_ACCESS_KEY"] = srv.SecretKey
	}
	out := d.runBlock("", "README.md", "make plugins minio", 0)
	if srv == nil {
		t.Fatal("README.md's S3 walk-through starts no MinIO")
	}
	for _, name := range []string{"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if _, ok := d.exported[name]; !ok {
			t.Errorf("the S3 walk-through does not export %s", name)
		}
	}
	for name := range d.exported {
		if _, ok := d.override[name]; !ok {
			t.Errorf("the S3 walk-through exports %s, which the test does not set for its MinIO", name)
		}
	}
	example := out[len(out)-1]
	wantLines(t, example.stdout+example.stderr, "every value read back correctly", "OK")
	// The example's doc says the same commands: they ran already.
	d.runBlock("", "examples/spill-s3/main.go", "make plugins", 0)
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.BucketExists(ctx, "goray-spill"); err != nil || !ok {
		t.Errorf("bucket goray-spill after the example: exists %v, %v (spill-s3.hcl creates it)", ok, err)
	}
	d.checkNothingLeft()
}

// checkMinioLine checks that the AWS variables the blocks (file, first
// pairs) export are the credentials and address of the MinIO the first
// block starts, as a user who runs them gets them.
func checkMinioLine(t *testing.T, blocks ...string) {
	t.Helper()
	minio := map[string]string{}
	for i := 0; i < len(blocks); i += 2 {
		var b docBlock
		for _, x := range docBlocks(t, blocks[i]) {
			if x.cmds[0] == blocks[i+1] {
				b = x
			}
		}
		exported := map[string]string{}
		for _, c := range b.cmds {
			words := strings.Fields(c)
			if strings.Contains(c, ".tools/minio server") {
				for j, w := range words {
					if name, v, ok := strings.Cut(w, "="); ok && !strings.HasPrefix(w, "-") {
						minio[name] = v
					}
					if w == "--address" && j+1 < len(words) {
						minio["address"] = words[j+1]
					}
				}
			}
			if rest, ok := strings.CutPrefix(c, "export "); ok {
				for _, w := range strings.Fields(rest) {
					name, v, _ := strings.Cut(w, "=")
					exported[name] = v
				}
			}
		}
		for name, want := range map[string]string{
			"AWS_ACCESS_KEY_ID":     minio["MINIO_ROOT_USER"],
			"AWS_SECRET_ACCESS_KEY": minio["MINIO_ROOT_PASSWORD"],
			"AWS_ENDPOINT_URL":      "http://" + minio["address"],
		} {
			if exported[name] == "" || exported[name] != want {
				t.Errorf("%s: export %s=%q, but the MinIO README.md starts needs %q", b, name, exported[name], want)
			}
		}
	}
}

// TestDocTransportExamples runs the allreduce and weight-sync examples as
// their docs say: the plugins built with make, two nodes loading the
// example's node.hcl, the example, stop.
func TestDocTransportExamples(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"examples/allreduce/main.go", "allreduce: 4 actors on 2 nodes"},
		{"examples/weight-sync/main.go", "weight-sync: 3 steps, 4 readers on 2 nodes"},
	} {
		t.Run(filepath.Base(filepath.Dir(c.file)), func(t *testing.T) {
			d := newDocRun(t, testCtxFor(t, 3*time.Minute))
			out := d.runBlock("", c.file, "make plugins", 0)
			wantLines(t, out[3].stdout+out[3].stderr, c.want, "OK")
			wantLines(t, out[4].stdout, "Stopped goray head node", "Stopped goray node")
			d.checkNothingLeft()
		})
	}
}

// TestDocCerts runs the certificate commands of README.md and
// docs/security.md and checks the files they say they make. They write
// certs/ into the working directory: a fresh one, not the repository.
func TestDocCerts(t *testing.T) {
	ctx := testCtxFor(t, time.Minute)
	for _, c := range []struct {
		file  string
		files []string
	}{
		{"README.md", []string{"ca.pem", "ca-key.pem", "node1.pem", "node1-key.pem"}},
		{"docs/security.md", []string{"ca.pem", "ca-key.pem", "head.pem", "head-key.pem", "node1.pem", "node1-key.pem"}},
	} {
		d := newDocRun(t, ctx)
		work := filepath.Join(d.tmp, "work")
		if err := os.Mkdir(work, 0o700); err != nil {
			t.Fatal(err)
		}
		d.runBlock(work, c.file, "goray cert ca --dir certs", 0)
		for _, f := range c.files {
			if _, err := os.Stat(filepath.Join(work, "certs", f)); err != nil {
				t.Errorf("%s: certs/%s after the commands: %v", c.file, f, err)
			}
		}
	}
}

// TestDocBenchCompare runs the quick comparison of docs/benchmarks.md:
// the working tree against HEAD, two alternating runs of each side of one
// metric, and the table it prints.
func TestDocBenchCompare(t *testing.T) {
	d := newDocRun(t, testCtxFor(t, 10*time.Minute))
	out := d.runBlock("", "docs/benchmarks.md", "make bench-compare BASE=HEAD RUNS=2 QUICK=1 FILTER='^single_client_tasks_async$'", 0)
	wantLines(t, out[0].stdout, "run 2 of 2: base", "run 2 of 2: head", "base median [min–max]", "single_client_tasks_async")
	if !strings.Contains(out[0].stdout, "load average") {
		t.Errorf("the comparison does not say the machine's load:\n%s", out[0].stdout)
	}
}

// TestDocMicrobenchmark runs the quick, filtered microbenchmark of
// docs/benchmarks.md, which writes its JSON report where it says.
func TestDocMicrobenchmark(t *testing.T) {
	d := newDocRun(t, testCtxFor(t, 3*time.Minute))
	report := filepath.Join(d.root, "bin", "quick.json")
	_ = os.Remove(report)
	t.Cleanup(func() { os.Remove(report) })
	d.runBlock("", "docs/benchmarks.md", "make bench", 0)
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("the quick microbenchmark wrote no report: %v", err)
	}
	var rep struct {
		Metrics []struct {
			Name string `json:"name"`
		} `json:"metrics"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Metrics) == 0 {
		t.Fatalf("%s: %d metrics, %v", report, len(rep.Metrics), err)
	}
	for _, m := range rep.Metrics {
		if !strings.Contains(m.Name, "task") && !strings.Contains(m.Name, "actor") {
			t.Errorf("metric %s does not match the filter 'tasks|actor'", m.Name)
		}
	}
	d.checkNothingLeft()
}

// TestDocPythonTransport runs the Python path of docs/writing-a-transport.md
// and sdk/python/README.md: install the Python SDK and its example
// transport, install the example as a plugin binary and check it
// (`goray plugins check` runs the conformance suite against it).
func TestDocPythonTransport(t *testing.T) {
	d := newDocRun(t, testCtxFor(t, 3*time.Minute))
	out := d.runBlock("", "docs/writing-a-transport.md", "make pyplugin", 0)
	wantLines(t, out[len(out)-1].stdout, "transport/pyshm", "conformance:  passed")
	// The README shows the same commands (they run once per test).
	d.runBlock("", "sdk/python/README.md", "make pyplugin", 0)
	d.checkNothingLeft()
}

// TestDocTransportTemplate runs the transport template's README (and the
// build command of docs/writing-a-transport.md): build the plugin, check
// it, start a node that loads it from the example's node.hcl (which the
// README shows as it is), list it, stop.
func TestDocTransportTemplate(t *testing.T) {
	d := newDocRun(t, testCtxFor(t, 3*time.Minute))
	const readme = "examples/transport-template/README.md"
	const build = "go build -o bin/plugins/goray-transport-tcp-template ./examples/transport-template"
	d.runBlock("", "docs/writing-a-transport.md", build, 0)
	d.runBlock("", readme, build, 0)
	check := d.runBlock("", readme, "goray plugins check bin/plugins/goray-transport-tcp-template", 0)
	wantLines(t, check[0].stdout, "tcp-template")
	out := d.runBlock("", readme, "goray start --head --port 6380 --config examples/transport-template/node.hcl", 0)
	wantLines(t, out[1].stdout, "tcp-template", "running")
	wantLines(t, out[2].stdout, "Stopped goray head node")
	d.checkNothingLeft()

	file, err := os.ReadFile(filepath.Join(d.root, "examples/transport-template/node.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(d.root, readme))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, []byte("```hcl\n"+string(file)+"```\n")) {
		t.Errorf("%s does not show examples/transport-template/node.hcl as it is:\n%s", readme, file)
	}
}
