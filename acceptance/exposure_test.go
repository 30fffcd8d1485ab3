package acceptance

import (
	"os"
	"strings"
	"testing"
)

// TestJobEnvForwardedOnly: a job's workers, on the driver's node and on
// another node, get their node's environment plus only the variables the
// job forwards (ray.ForwardEnv by name and by prefix, and
// $GORAY_FORWARD_ENV) and those it sets (ray.EnvVars, Ray's runtime_env
// env_vars, which win over forwarded ones): a secret in the driver's
// environment reaches no worker, and `goray list jobs` and `goray status`
// never show what the job forwards or sets.
func TestJobEnvForwardedOnly(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	n1 := joinNode(t, ctx, h, "127.0.0.2", "")
	const secret = "planted-secret-4711"
	names := []string{"AWS_SECRET_ACCESS_KEY", "ACC_FWD_ONE", "ACC_FWDP_A", "ACC_FWDP_B", "ACC_NOT_FWD", "TESTJOB_FORWARD_ENV", markerEnv, "ACC_SET", "ACC_SET_EQ"}
	j := startJob(t, jobOptions{addr: h.addr, env: []string{
		"AWS_SECRET_ACCESS_KEY=" + secret,
		"ACC_FWD_ONE=one", "ACC_FWDP_A=a", "ACC_FWDP_B=b", "ACC_NOT_FWD=no",
		"TESTJOB_FORWARD_ENV=ACC_FWD_ONE,ACC_FWDP_*",
		"TESTJOB_ENV_VARS=ACC_SET=set-by-job,ACC_FWDP_B=set-wins,ACC_SET_EQ=a=b",
	}}, testjobBin, append([]string{"env"}, names...)...)
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("env job exited %d:\n%s", code, out)
	}
	nodes := map[string]map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.SplitN(l, " ", 3)
		if len(f) != 3 || f[0] != "env" {
			continue
		}
		if nodes[f[1]] == nil {
			nodes[f[1]] = map[string]string{}
		}
		name, val, ok := strings.Cut(f[2], "=")
		if !ok {
			name, val = strings.TrimSuffix(f[2], " unset"), "<unset>"
		}
		nodes[f[1]][name] = val
	}
	if len(nodes) != 2 || nodes[n1.id] == nil {
		t.Fatalf("want reports from the head and node %s:\n%s", n1.id[:8], out)
	}
	wantAWS := "<unset>" // unless the tests themselves run with one
	if v, ok := os.LookupEnv("AWS_SECRET_ACCESS_KEY"); ok {
		wantAWS = v
	}
	for id, env := range nodes {
		for name, want := range map[string]string{
			"AWS_SECRET_ACCESS_KEY": wantAWS,
			"ACC_FWD_ONE":           "one",
			"ACC_FWDP_A":            "a",
			"ACC_FWDP_B":            "set-wins", // EnvVars wins over ForwardEnv
			"ACC_SET":               "set-by-job",
			"ACC_SET_EQ":            "a=b",
			"ACC_NOT_FWD":           "<unset>",
			"TESTJOB_FORWARD_ENV":   "<unset>",
			markerEnv:               j.marker,
		} {
			if got := env[name]; got != want {
				t.Errorf("node %s: a worker sees %s=%q, want %q", id[:8], name, got, want)
			}
		}
	}
	for _, args := range [][]string{
		{"list", "jobs", "--json", "--address", h.addr},
		{"list", "jobs", "--address", h.addr},
		{"status", "--json", "--temp-dir", h.tempDir},
	} {
		r := runGoray(t, ctx, args...)
		if r.code != 0 {
			t.Fatalf("goray %s: %s", strings.Join(args, " "), r)
		}
		for _, leak := range []string{secret, "ACC_FWDP_A", "ACC_FWD_ONE", j.marker, "set-by-job"} {
			if strings.Contains(r.stdout, leak) {
				t.Errorf("goray %s shows %q:\n%s", strings.Join(args, " "), leak, r.stdout)
			}
		}
	}
}
