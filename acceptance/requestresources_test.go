package acceptance

import (
	"strings"
	"testing"
)

// TestRequestResourcesShownWithoutAutoscaler: a driver's
// ray.RequestResources on a cluster started with `goray start` (no
// autoscaler) is stored, and `goray status` shows it and says nothing acts
// on it, in text and in --json; clearing it removes it. Before, the
// request was invisible: status said only that no autoscaler ran (issue 41).
func TestRequestResourcesShownWithoutAutoscaler(t *testing.T) {
	ctx := testCtx(t)
	h := startHead(t, ctx)
	if code, out := startJob(t, jobOptions{addr: h.addr}, testjobBin, "as-request", "16").wait(ctx); code != 0 {
		t.Fatalf("request job: exit %d\n%s", code, out)
	}
	r := runGoray(t, ctx, "status", "--temp-dir", h.tempDir)
	if r.code != 0 {
		t.Fatalf("goray status: %s", r)
	}
	wantLines(t, r.stdout, "Resource request (ray.RequestResources), stored; no autoscaler acts on it:", "  {CPU: 1} x 16")
	r = runGoray(t, ctx, "status", "--json", "--temp-dir", h.tempDir)
	if r.code != 0 || !strings.Contains(r.stdout, `"resource_request"`) || !strings.Contains(r.stdout, `"count": 16`) {
		t.Fatalf("goray status --json lacks the request of 16 CPUs: %s", r)
	}

	if code, out := startJob(t, jobOptions{addr: h.addr}, testjobBin, "as-request", "0").wait(ctx); code != 0 {
		t.Fatalf("clearing the request: exit %d\n%s", code, out)
	}
	r = runGoray(t, ctx, "status", "--temp-dir", h.tempDir)
	if r.code != 0 || strings.Contains(r.stdout, "Resource request") {
		t.Fatalf("goray status after the request was cleared still shows one: %s", r)
	}
}
