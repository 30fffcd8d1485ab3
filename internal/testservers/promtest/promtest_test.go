package promtest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/metrics"
)

// TestScrapesWithToken: Prometheus finds two endpoints through a file_sd
// file and scrapes them with the token file: the one that requires that
// token is up, the one that requires another is down (401).
func TestScrapesWithToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("right-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := func(token string) string {
		creds, err := auth.New(token, nil)
		if err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := metrics.Serve(lis, metrics.NewRegistry(""), creds, nil)
		t.Cleanup(func() { _ = srv.Close(context.Background()) })
		return srv.Addr()
	}
	good, bad := serve("right-token"), serve("other-token")
	disc := metrics.NewDiscovery(filepath.Join(dir, "sd", "targets.json"))
	if err := disc.Update(metrics.TargetGroups([]metrics.NodeTarget{
		{Address: good, NodeID: "good", NodeName: "a"}, {Address: bad, NodeID: "bad", NodeName: "b"},
	}, false)); err != nil {
		t.Fatal(err)
	}
	s := Start(t, Options{DiscoveryFile: disc.Path(), TokenFile: tokenFile})
	pid := s.cmd.Process.Pid
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want := map[string]float64{"good": 1, "bad": 0}
	for {
		got := map[string]float64{}
		samples, err := s.Query(ctx, `up{job="goray"}`)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range samples {
			got[x.Metric["node_id"]] = x.Value
		}
		if len(got) == 2 && got["good"] == want["good"] && got["bad"] == want["bad"] {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("up by node_id = %v, want %v\n%s", got, want, s.Log(20))
		case <-time.After(200 * time.Millisecond): // polling interval
		}
	}
	if _, err := s.Query(ctx, `sum(`); err == nil {
		t.Fatal("a malformed query succeeded")
	}
	s.Stop()
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("prometheus (pid %d) still runs after Stop", pid)
	}
}
