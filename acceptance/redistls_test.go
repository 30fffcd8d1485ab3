package acceptance

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/testservers/redistest"
)

// redisTLSGCS is a gcs block keeping the tables in the Redis at addr over
// TLS, with the given tls block body.
func redisTLSGCS(addr, tlsBody string) string {
	return fmt.Sprintf("gcs {\n  storage = \"redis\"\n  redis {\n    address = %q\n    prefix  = \"tls\"\n    tls {\n%s    }\n  }\n}\n", addr, tlsBody)
}

// TestGCSRedisOverTLS: a head keeps its GCS in a real redis-server that
// serves TLS only and requires client certificates. The config names the
// CA, certificate and key relative to its own file, the server name comes
// from $GORAY_GCS_REDIS_TLS_SERVER_NAME. The head starts, runs a job, is
// stopped and started again with --resume, and resumes its cluster from
// the TLS Redis (same id, the finished job). A head given another CA does not start,
// and says the TLS verification failed; one without the client
// certificate does not start either, and says the server refused it.
// (Before this change a redis block had no tls settings: no head could
// reach such a server.)
func TestGCSRedisOverTLS(t *testing.T) {
	ctx := testCtx(t)
	rs := redistest.Start(t, redistest.WithTLS(redistest.ClientCertRequired))
	env := []string{"GORAY_GCS_REDIS_PASSWORD=" + rs.Password, "GORAY_GCS_REDIS_TLS_SERVER_NAME=localhost"}
	// The config sits beside the certificates and names them relatively.
	cfg := writeConfig(t, rs.TLS.Dir, gcsHealth+redisTLSGCS(rs.Address,
		fmt.Sprintf("      ca_file   = %q\n      cert_file = %q\n      key_file  = %q\n",
			filepath.Base(rs.TLS.CA), filepath.Base(rs.TLS.ClientCert), filepath.Base(rs.TLS.ClientKey))))
	h := startHeadEnv(t, ctx, env, "--config", cfg, "--num-cpus", "1")
	dumpHeadLogs(t, h)
	first := h.gcsInfo(t)
	if want := "redis " + rs.Address + " (TLS)"; first.GCSStorage != want || first.GCSRestored {
		t.Fatalf("GCS: %+v, want a new cluster on %s", first, want)
	}
	j := startJob(t, jobOptions{addr: h.addr}, quickstartBin)
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("quickstart exited %d:\n%s", code, out)
	}

	// Stopped and started again on the same Redis with --resume (a clean
	// stop ends the cluster otherwise): the cluster resumes.
	if r := runGoray(t, ctx, "stop", "--temp-dir", h.tempDir); r.code != 0 {
		t.Fatalf("goray stop: %s", r)
	}
	r := runGorayEnv(t, ctx, env, "start", "--head", "--resume", "--port", strconv.Itoa(h.port), "--temp-dir", h.tempDir,
		"--dashboard-port", "-1", "--config", cfg, "--num-cpus", "1")
	if r.code != 0 {
		t.Fatalf("goray start again: %s", r)
	}
	latest, err := filepath.EvalSymlinks(filepath.Join(h.tempDir, "session_latest"))
	if err != nil {
		t.Fatal(err)
	}
	h.session = latest
	again := h.gcsInfo(t)
	if !again.GCSRestored || again.ClusterID != first.ClusterID || again.GCSStorage != first.GCSStorage {
		t.Fatalf("restarted head: %+v, want cluster %s restored from %s", again, first.ClusterID, first.GCSStorage)
	}
	if jobs := runGoray(t, ctx, "list", "jobs", "--temp-dir", h.tempDir); !strings.Contains(jobs.stdout, "FINISHED") {
		t.Errorf("the resumed cluster lost its finished job:\n%s", jobs)
	}
	waitFor(t, 30*time.Second, "goray status showing the TLS storage healthy", func() bool {
		gs, r := h.gcsStatus(ctx)
		return r.code == 0 && gs.GCS.Healthy && gs.GCS.Restored && strings.Contains(gs.GCS.Storage, "(TLS)")
	})

	// Heads that cannot use the server do not start, and say why.
	otherCA := t.TempDir()
	if err := auth.CreateCA(otherCA, "another CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, tls string
		want      []string
	}{
		{"another CA", fmt.Sprintf("      ca_file   = %q\n      cert_file = %q\n      key_file  = %q\n",
			filepath.Join(otherCA, auth.CAFile), rs.TLS.ClientCert, rs.TLS.ClientKey),
			[]string{rs.Address, "TLS verification", "ca_file"}},
		{"no client certificate", fmt.Sprintf("      ca_file = %q\n", rs.TLS.CA),
			[]string{rs.Address, "refused this client's TLS connection", "cert_file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := shortTempDir(t)
			bad := writeConfig(t, tmp, redisTLSGCS(rs.Address, tc.tls))
			r := runGorayEnv(t, ctx, env, "start", "--head", "--port", strconv.Itoa(freePort(t)), "--temp-dir", tmp,
				"--dashboard-port", "-1", "--config", bad, "--num-cpus", "1")
			if r.code == 0 {
				runGoray(t, ctx, "stop", "--temp-dir", tmp, "--force")
				t.Fatalf("the head started:\n%s", r)
			}
			t.Logf("goray start --head:\n%s", r.stderr)
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("the error does not say %q:\n%s", w, r)
				}
			}
		})
	}
}
