package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/logrotate"
)

// TestLogRotationUnderFastJob: a job's task writes 12 MiB to stdout on a
// head whose logs block says max_file_size = "1MiB" and max_files = 2.
// The worker's .out file rotates, the log directory stays within 1 MiB ×
// (2+1) plus slack, and `goray logs --tail N` returns the newest N lines,
// in order, read across the rotated file and the current one.
func TestLogRotationUnderFastJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a loaded machine copies 12 MiB slowly
	defer cancel()
	cfg := writeConfig(t, shortTempDir(t), "logs {\n  max_file_size = \"1MiB\"\n  max_files = 2\n}\n")
	h := startHead(t, ctx, "--config", cfg)
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr, env: []string{"GORAY_LOG_TO_DRIVER=0"}}, testjobBin, "log-flood", "12", dir)
	worker := strings.TrimSpace(waitFile(t, j, 30*time.Second, filepath.Join(dir, "worker")))
	name := "worker-" + worker + ".out"

	// goray logs --follow, started before the task writes, follows the
	// file across its rotations to the last line.
	var fout, ferr syncBuffer
	follow := exec.Command(gorayBin, "logs", "--temp-dir", h.tempDir, "--follow", name)
	follow.Env = baseEnv()
	follow.Stdout, follow.Stderr = &fout, &ferr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- follow.Wait() }()
	t.Cleanup(func() {
		_ = follow.Process.Kill()
		<-exited
	})
	logDir := filepath.Join(h.session, "logs")
	path := filepath.Join(logDir, name)
	// The task printed "flood-start" before it waits: the follow has the
	// first file open once it printed that.
	waitFor(t, 30*time.Second, "goray logs --follow to print the task's first line", func() bool {
		return strings.HasPrefix(fout.String(), "flood-start\n")
	})
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("testjob log-flood exited %d:\n%s", code, out)
	}
	ready, err := os.ReadFile(filepath.Join(dir, "ready"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(ready))
	if len(f) != 2 {
		t.Fatalf("ready file: %q", ready)
	}
	lines, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	line := func(i int) string { return fmt.Sprintf("flood %08d %s", i, strings.Repeat("x", 84)) }
	if f[0] != worker {
		t.Fatalf("ready file names worker %s, the task wrote %s", f[0], worker)
	}

	// The raylet copies the worker's pipe: wait for the last line.
	waitFor(t, 30*time.Second, "the task's last line in its log file", func() bool {
		b, err := os.ReadFile(path)
		return err == nil && strings.HasSuffix(string(b), line(lines-1)+"\n")
	})
	files, err := logrotate.Files(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("%s did not rotate after 12 MiB with max_file_size 1MiB: %q", name, files)
	}
	// Old files are removed in the background: wait for the bound.
	const bound = 3<<20 + 1<<20 // max_file_size × (max_files+1), and 1 MiB for the other logs
	waitFor(t, 30*time.Second, "the log directory within its bound", func() bool {
		files, _ := logrotate.Files(path)
		return dirBytes(t, logDir) <= bound && len(files) == 3
	})
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.Size() > 1<<20 {
			t.Errorf("%s: %d bytes, more than max_file_size", f, fi.Size())
		}
	}

	// The newest lines, across the rotated file and the current one.
	cur, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := strings.Count(string(cur), "\n") + 50
	r := runGoray(t, ctx, "logs", "--temp-dir", h.tempDir, "--tail", strconv.Itoa(n), name)
	if r.code != 0 {
		t.Fatalf("goray logs --tail %d %s: %s", n, name, r)
	}
	var want strings.Builder
	for i := lines - n; i < lines; i++ {
		want.WriteString(line(i) + "\n")
	}
	if r.stdout != want.String() {
		got := strings.Split(r.stdout, "\n")
		t.Errorf("goray logs --tail %d: %d lines, first %.20q, last %.20q; want lines %d to %d in order",
			n, len(got)-1, got[0], got[max(0, len(got)-2)], lines-n, lines-1)
	}

	// The follow went on across the rotations to the last line, in order
	// (lines in rotated files removed before it read them are missing:
	// the task wrote far faster than a follow polls).
	waitFor(t, 30*time.Second, "goray logs --follow to print the last line", func() bool {
		return strings.Contains(fout.String(), line(lines-1)+"\n")
	})
	prev := -1
	for l := range strings.Lines(strings.TrimPrefix(fout.String(), "flood-start\n")) {
		var i int
		if _, err := fmt.Sscanf(l, "flood %d", &i); err != nil || i <= prev {
			t.Fatalf("goray logs --follow printed %.20q after line %d; stderr:\n%s", l, prev, ferr.String())
		}
		prev = i
	}
}

// dirBytes returns the total size of dir's files.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// TestRefusalFloodLogBounded: 1500 wrong dashboard logins and 1500
// refused handshakes on the collective plugin's data listener, from three
// peers (127.0.0.1-3), add at most one line per peer per minute to the
// node's log and to the plugin's log file.
func TestRefusalFloodLogBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // 3 000 refusals on a loaded machine
	defer cancel()
	dataPort := freePort(t)
	cfg := writeConfig(t, shortTempDir(t), fmt.Sprintf("plugin_dir = %q\nplugin \"transport\" \"collective\" {\n  config {\n    listen = \"127.0.0.1:%d\"\n  }\n}\n", pluginDir, dataPort))
	h := startHead(t, ctx, "--config", cfg)
	var info struct {
		DashboardAddress string `json:"dashboard_address"`
	}
	b, err := os.ReadFile(filepath.Join(h.session, "node.json"))
	if err != nil || json.Unmarshal(b, &info) != nil || info.DashboardAddress == "" {
		t.Fatalf("node.json dashboard_address: %q (%v)\n%s", info.DashboardAddress, err, b)
	}
	dataAddr := fmt.Sprintf("127.0.0.1:%d", dataPort)
	waitFor(t, 30*time.Second, "the collective plugin's data listener", func() bool {
		c, err := net.Dial("tcp", dataAddr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})

	const perPeer = 500
	peers := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(peers))
	for _, p := range peers {
		wg.Go(func() { errs <- wrongLogins(ctx, info.DashboardAddress, p, perPeer) })
		wg.Go(func() { errs <- refusedHandshakes(ctx, dataAddr, p, perPeer) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// One more of each from a fourth peer: once its lines are in the
	// logs, so are the lines of every refusal before it (each was answered
	// before the next started, and the plugin's output reaches the node in
	// order).
	if err := wrongLogins(ctx, info.DashboardAddress, "127.0.0.4", 1); err != nil {
		t.Fatal(err)
	}
	if err := refusedHandshakes(ctx, dataAddr, "127.0.0.4", 1); err != nil {
		t.Fatal(err)
	}
	nodeLog := filepath.Join(h.session, "logs", "node.log")
	pluginLog := filepath.Join(h.session, "logs", "plugin-transport-collective.log")
	read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }
	count := func(log string, what ...string) int {
		n := 0
	lines:
		for l := range strings.Lines(log) {
			for _, w := range what {
				if !strings.Contains(l, w) {
					continue lines
				}
			}
			n++
		}
		return n
	}
	waitFor(t, 30*time.Second, "the fourth peer's refusals in the logs", func() bool {
		n, p := read(nodeLog), read(pluginLog)
		return count(n, "dashboard login refused", "peer=127.0.0.4") == 1 && count(n, "refused a data connection", "peer=127.0.0.4") == 1 &&
			count(p, "refused a data connection", `"peer":"127.0.0.4"`) == 1
	})
	// A peer's refusals are logged once per minute: over the flood's
	// time, each of the four peers has at most 1 + minutes lines.
	most := 4 * (1 + int(time.Since(start)/time.Minute))
	n, p := read(nodeLog), read(pluginLog)
	for _, c := range []struct {
		file, what, log string
	}{
		{"node.log", "dashboard login refused", n},
		{"node.log", "refused a data connection", n},
		{"plugin-transport-collective.log", "refused a data connection", p},
	} {
		if k := count(c.log, c.what); k > most || k < 4 {
			t.Errorf("%s: %d lines %q for %d refusals from 4 peers, want 4 to %d", c.file, k, c.what, 3*perPeer+1, most)
		}
	}
}

// wrongLogins posts n wrong tokens to the dashboard's login form at addr,
// one after the other, from the local address ip.
func wrongLogins(ctx context.Context, addr, ip string, n int) error {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for i := range n {
		form := url.Values{"token": {fmt.Sprintf("not-the-token-%d", i)}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/login", strings.NewReader(form.Encode()))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := c.Do(req)
		if err != nil {
			return fmt.Errorf("login %d from %s: %w", i, ip, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			return fmt.Errorf("login %d from %s: %s, want 401", i, ip, resp.Status)
		}
	}
	return nil
}

// refusedHandshakes opens n connections to a plugin's data listener at
// addr from the local address ip, one after the other, each sending a
// handshake without the token and reading until the plugin closes it.
func refusedHandshakes(ctx context.Context, addr, ip string, n int) error {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	for i := range n {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("connection %d from %s: %w", i, ip, err)
		}
		stop := context.AfterFunc(ctx, func() { _ = c.Close() })
		_, _ = c.Write(make([]byte, 128)) // no token: zeros
		_, err = io.Copy(io.Discard, c)   // until the plugin closes it
		stop()
		_ = c.Close()
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("connection %d from %s: %w", i, ip, ctx.Err())
		}
	}
	return nil
}
