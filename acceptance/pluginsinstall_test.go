package acceptance

import (
	"archive/zip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/testservers/miniotest"
)

// The fake module proxy of the install tests, made once on first use.
var (
	proxyOnce sync.Once
	proxyErr  error
	proxyEnv  []string
)

// proxyVersion is the version under which the proxy serves this working
// tree as github.com/goray-dev/goray.
const proxyVersion = "v0.0.0-20260101000000-000000000000"

// moduleProxy returns the environment under which `go install
// github.com/goray-dev/goray/...@version` works offline: GOPROXY serves
// this working tree (its files git does not ignore) as proxyVersion from a
// file:// proxy, and every dependency from the local module cache's
// download directory; modules are extracted into a module cache of the
// tests' own. The zip leaves testdata directories out: the Go module zip
// format refuses sdk/storage's fuzz corpus file named "nul" (a reserved
// name on Windows), so the real proxy would refuse this tree as it is.
func moduleProxy(t *testing.T) []string {
	t.Helper()
	proxyOnce.Do(func() {
		dir := filepath.Join(filepath.Dir(gorayBin), "proxy")
		v := filepath.Join(dir, "github.com", "goray-dev", "goray", "@v")
		if proxyErr = os.MkdirAll(v, 0o755); proxyErr != nil {
			return
		}
		out, err := exec.Command("git", "-C", "..", "ls-files", "--cached", "--others", "--exclude-standard", "-z").Output()
		if err != nil {
			proxyErr = fmt.Errorf("git ls-files: %w", err)
			return
		}
		if proxyErr = writeModuleZip(filepath.Join(v, proxyVersion+".zip"), strings.Split(string(out), "\x00")); proxyErr != nil {
			return
		}
		mod, err := os.ReadFile("../go.mod")
		if err != nil {
			proxyErr = err
			return
		}
		for name, data := range map[string]string{
			proxyVersion + ".mod":  string(mod),
			proxyVersion + ".info": `{"Version":"` + proxyVersion + `","Time":"2026-01-01T00:00:00Z"}`,
			"list":                 proxyVersion + "\n",
		} {
			if proxyErr = os.WriteFile(filepath.Join(v, name), []byte(data), 0o644); proxyErr != nil {
				return
			}
		}
		gomodcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
		if err != nil {
			proxyErr = err
			return
		}
		proxyEnv = []string{
			"GOPROXY=file://" + dir + ",file://" + filepath.Join(strings.TrimSpace(string(gomodcache)), "cache", "download"),
			"GOMODCACHE=" + filepath.Join(filepath.Dir(gorayBin), "modcache"),
			"GOFLAGS=-modcacherw", // so that the test's module cache can be removed
			"GOSUMDB=off",         // offline: no checksum database to ask
		}
	})
	if proxyErr != nil {
		t.Fatal(proxyErr)
	}
	return proxyEnv
}

// writeModuleZip writes the module zip of the repository's files.
func writeModuleZip(path string, files []string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	z := zip.NewWriter(f)
	for _, name := range files {
		if name == "" || strings.Contains("/"+name, "/testdata/") {
			continue
		}
		data, err := os.ReadFile(filepath.Join("..", name))
		if err != nil { // deleted in the working tree
			continue
		}
		w, err := z.Create("github.com/goray-dev/goray@" + proxyVersion + "/" + name)
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	if err := z.Close(); err != nil {
		return err
	}
	return f.Close()
}

// TestPluginsInstall: `goray plugins install` of a Go module path@version
// (go install through a module proxy) and of a local binary puts each
// binary in the config's plugin_dir under goray-<kind>-<name> (asked of
// the plugin) and locks its sha256 next to the config; a node started with
// the config runs both, pinned; once a binary changes, a node refuses it
// with both hashes, the binary and the lock file.
func TestPluginsInstall(t *testing.T) {
	ctx := testCtxFor(t, 3*time.Minute)
	dir := shortTempDir(t)
	spill := filepath.Join(dir, "spill")
	cfg := writeConfig(t, dir, fmt.Sprintf(`plugin_dir = "plugins"
plugin "storage" "fs" {
  config {
    directory = %q
  }
}
plugin "transport" "fast" {
  command = "goray-transport-shm"
}
`, spill))
	r := runGorayEnv(t, ctx, moduleProxy(t), "plugins", "install", "--config", cfg, "github.com/goray-dev/goray/plugins/fs@"+proxyVersion)
	if r.code != 0 {
		t.Fatalf("install of a module: %s", r)
	}
	wantLines(t, r.stdout, `Installed storage plugin "fs" (version `+proxyVersion+`) as `+filepath.Join(dir, "plugins", "goray-storage-fs"))
	r = runGoray(t, ctx, "plugins", "install", "--config", cfg, filepath.Join(pluginDir, "goray-transport-shm"))
	if r.code != 0 {
		t.Fatalf("install of a binary: %s", r)
	}
	wantLines(t, r.stdout, `Installed transport plugin "shm"`, "goray-transport-shm")
	lock, err := os.ReadFile(filepath.Join(dir, "goray.lock.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`plugin "plugins/goray-storage-fs" {`, `source  = "github.com/goray-dev/goray/plugins/fs@` + proxyVersion + `"`,
		`plugin "plugins/goray-transport-shm" {`, `source  = "` + filepath.Join(pluginDir, "goray-transport-shm") + `"`} {
		if !strings.Contains(string(lock), want) {
			t.Errorf("lock file lacks %q:\n%s", want, lock)
		}
	}
	sumFS := lockedSum(t, string(lock), "plugins/goray-storage-fs")

	h := startHead(t, ctx, "--config", cfg)
	ps := h.plugins(t)
	if len(ps) != 2 {
		t.Fatalf("plugins: %+v", ps)
	}
	r = runGoray(t, ctx, "plugins", "list", "--address", h.addr)
	wantLines(t, r.stdout, "sha256:"+sumFS[:12])
	for _, p := range ps {
		if p.State != "running" {
			t.Errorf("plugin %s/%s is %s", p.Kind, p.Name, p.State)
		}
	}
	if r := runGoray(t, ctx, "stop", "--temp-dir", h.tempDir); r.code != 0 {
		t.Fatalf("goray stop: %s", r)
	}

	// The installed binary changes: the node refuses it.
	bin := filepath.Join(dir, "plugins", "goray-storage-fs")
	f, err := os.OpenFile(bin, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("changed"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r = runGoray(t, ctx, "start", "--head", "--port", fmt.Sprint(freePort(t)), "--temp-dir", shortTempDir(t), "--dashboard-port", "-1", "--config", cfg)
	if r.code != 1 {
		t.Fatalf("start with a changed binary: want exit 1, got %s", r)
	}
	for _, want := range []string{"node.hcl:2", "Plugin checksum mismatch", bin, sumFS, filepath.Join(dir, "goray.lock.hcl")} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the error lacks %q:\n%s", want, r.stderr)
		}
	}
	waitNoProcs(t, 10*time.Second, "processes of the refused start", func(p proc) bool { return p.mentions(dir) })
}

// lockedSum is the sha256 the lock file records for binary.
func lockedSum(t *testing.T, lock, binary string) string {
	t.Helper()
	_, rest, ok := strings.Cut(lock, `plugin "`+binary+`" {`)
	_, rest, ok2 := strings.Cut(rest, `sha256  = "`)
	if !ok || !ok2 || len(rest) < 64 {
		t.Fatalf("no sha256 of %s in the lock file:\n%s", binary, lock)
	}
	return rest[:64]
}

// TestTwoStoragesOneBinary: two `plugin "storage"` blocks name one
// goray-storage-s3 binary (command) with different configs (buckets) and
// args; each runs its own process. Two heads with that config, one spilling
// to each block, fill their own bucket of one real MinIO and not the
// other's while its job runs.
func TestTwoStoragesOneBinary(t *testing.T) {
	ctx := testCtxFor(t, 4*time.Minute)
	buildSpillBinaries(t)
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "bucket-a")
	srv.CreateBucket(t, "bucket-b")
	config := func(spillTo string) string {
		var blocks strings.Builder
		for _, b := range []string{"a", "b"} {
			fmt.Fprintf(&blocks, `plugin "storage" %q {
  command   = "goray-storage-s3"
  args      = ["--block", %q]
  log_level = "warn"
  config {
    endpoint   = %q
    bucket     = "bucket-%s"
    tls        = false
    access_key = %q
    secret_key = %q
  }
}
`, b, b, srv.Endpoint, b, srv.AccessKey, srv.SecretKey)
		}
		return writeConfig(t, shortTempDir(t), fmt.Sprintf(`object_store {
  memory = "256MiB"
}
plugin_dir = %q
%s
spilling {
  storage       = %q
  min_file_size = "32MiB"
  wait          = "40s"
}
`, spillPluginDir, blocks.String(), spillTo))
	}
	for _, spillTo := range []string{"a", "b"} {
		h := startHead(t, ctx, "--config", config(spillTo))
		ps := h.plugins(t)
		if len(ps) != 2 || ps[0].Pid == ps[1].Pid || ps[0].State != "running" || ps[1].State != "running" {
			t.Fatalf("plugins: %+v, want two running processes", ps)
		}
		for _, p := range ps {
			pr, ok := readProc(p.Pid)
			want := []string{filepath.Join(spillPluginDir, "goray-storage-s3"), "--block", p.Name}
			if !ok || !slices.Equal(pr.cmdline, want) || !pr.hasEnv("GORAY_PLUGIN_LOG_LEVEL=warn") {
				t.Errorf("plugin %s: command line %q, want %q, with log level warn", p.Name, pr.cmdline, want)
			}
		}
		other := map[string]string{"a": "b", "b": "a"}[spillTo]
		j := startJob(t, jobOptions{addr: h.addr}, spillExample, "--objects", "24", "--size-mib", "32")
		waitFor(t, 40*time.Second, "spill files in bucket-"+spillTo, func() bool {
			return len(bucketFiles(t, srv, "bucket-"+spillTo)) > 0
		})
		if n := len(bucketFiles(t, srv, "bucket-"+other)); n != 0 {
			t.Errorf("bucket-%s holds %d files while the head spills to %s", other, n, spillTo)
		}
		if code, out := j.wait(ctx); code != 0 {
			t.Fatalf("spill-s3 exited %d:\n%s", code, out)
		}
		if spilled, _, _ := spillStats(t, ctx, h); spilled == 0 {
			t.Errorf("head spilling to %q spilled nothing", spillTo)
		}
		if r := runGoray(t, ctx, "stop", "--temp-dir", h.tempDir); r.code != 0 {
			t.Fatalf("goray stop: %s", r)
		}
	}
}

// TestDocPluginsInstall runs docs/plugins.md in a directory holding the
// goray.hcl it shows: install the shm transport from its module path (the
// module proxy serves this working tree as the latest version; see
// moduleProxy), start a head with the config, list its plugins (locked),
// stop.
func TestDocPluginsInstall(t *testing.T) {
	d := newDocRun(t, testCtxFor(t, 3*time.Minute))
	const doc = "docs/plugins.md"
	const cfg = "plugin_dir = \"plugins\"\n\nplugin \"transport\" \"shm\" {}\n"
	text, err := os.ReadFile(filepath.Join(d.root, doc))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "```hcl\n"+cfg+"```\n") {
		t.Fatalf("%s does not show the goray.hcl the test runs:\n%s", doc, cfg)
	}
	work := shortTempDir(t) // the user's directory: not the commands' TMPDIR, which must be left empty
	if err := os.WriteFile(filepath.Join(work, "goray.hcl"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d.env = append(d.env, moduleProxy(t)...)
	out := d.runBlock(work, doc, "goray plugins install github.com/goray-dev/goray/plugins/shm@latest", 0)
	wantLines(t, out[0].stdout, `Installed transport plugin "shm" (version `+proxyVersion+`) as plugins/goray-transport-shm`, "Locked sha256")
	wantLines(t, out[2].stdout, "shm", "running", "sha256:")
	wantLines(t, out[3].stdout, "Stopped goray head node")
	lock, err := os.ReadFile(filepath.Join(work, "goray.lock.hcl"))
	if err != nil || !strings.Contains(string(lock), `plugin "plugins/goray-transport-shm" {`) {
		t.Errorf("lock file: %v\n%s", err, lock)
	}
	d.checkNothingLeft()
}
