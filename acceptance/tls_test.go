package acceptance

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/auth"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// tlsFiles makes the certificates of name with `goray cert issue` from the
// CA in caDir and returns them.
func tlsFiles(t *testing.T, ctx context.Context, caDir, name, ip string) auth.TLSFiles {
	t.Helper()
	if r := runGoray(t, ctx, "cert", "issue", "--dir", caDir, "--name", name, "--host", ip); r.code != 0 {
		t.Fatalf("goray cert issue: %s", r)
	}
	return auth.TLSFiles{CA: filepath.Join(caDir, "ca.pem"), Cert: filepath.Join(caDir, name+".pem"), Key: filepath.Join(caDir, name+"-key.pem")}
}

func tlsBlock(f auth.TLSFiles) string {
	return "tls {\n  ca_file = \"" + f.CA + "\"\n  cert_file = \"" + f.Cert + "\"\n  key_file = \"" + f.Key + "\"\n}\n"
}

func tlsEnv(f auth.TLSFiles) []string {
	return []string{auth.EnvTLSCA + "=" + f.CA, auth.EnvTLSCert + "=" + f.Cert, auth.EnvTLSKey + "=" + f.Key}
}

// TestTLSCluster: a head and two nodes with mutual TLS run the cluster
// example (tasks on every node, a 48 MiB block moved through the data
// plane) for a driver with its own certificate; a node whose certificate
// comes from another CA cannot join, and a client without TLS is refused.
func TestTLSCluster(t *testing.T) {
	ctx := testCtx(t)
	certs := shortTempDir(t)
	caDir, otherDir := filepath.Join(certs, "ca"), filepath.Join(certs, "other")
	for _, d := range []string{caDir, otherDir} {
		if r := runGoray(t, ctx, "cert", "ca", "--dir", d); r.code != 0 {
			t.Fatalf("goray cert ca: %s", r)
		}
	}
	headTLS := tlsFiles(t, ctx, caDir, "head", "127.0.0.1")
	h := startHead(t, ctx, "--config", writeConfig(t, shortTempDir(t), fastHealth+tlsBlock(headTLS)), "--num-cpus", "2", "--node-name", "head")
	var nodes []*clusterNode
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		f := tlsFiles(t, ctx, caDir, "node-"+ip, ip)
		nodes = append(nodes, joinNode(t, ctx, h, ip, "", "--config", writeConfig(t, shortTempDir(t), tlsBlock(f))))
	}

	// A node with a certificate of another CA is refused at once.
	rogue := tlsFiles(t, ctx, otherDir, "rogue", "127.0.0.4")
	rogueDir := shortTempDir(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		runGoray(t, ctx, "stop", "--temp-dir", rogueDir, "--force")
	})
	r := runGoray(t, ctx, "start", "--address", h.addr, "--temp-dir", rogueDir, "--node-ip", "127.0.0.4",
		"--config", writeConfig(t, shortTempDir(t), tlsBlock(rogue)))
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "TLS") {
		t.Fatalf("a node with another CA's certificate: want a TLS refusal, got %s", r)
	}
	t.Logf("the rogue node was refused: %s", strings.TrimSpace(r.stdout+r.stderr))

	tok, err := auth.ReadTokenFile(tokenPath)
	if err != nil {
		t.Fatal(err)
	}
	driverTLS := tlsFiles(t, ctx, caDir, "driver", "127.0.0.1")
	withTLS, err := auth.New(tok, &driverTLS)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := auth.New(tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := pb.NewGcsClient(dial(t, h.addr, plain)).GetAllNodes(cctx, &pb.GetAllNodesRequest{}); err == nil {
		t.Error("a client without TLS reached the GCS")
	}
	rep, err := pb.NewGcsClient(dial(t, h.addr, withTLS)).GetAllNodes(ctx, &pb.GetAllNodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	alive := 0
	for _, n := range rep.GetNodes() {
		if n.GetInfo().GetState() == "ALIVE" {
			alive++
		}
	}
	if alive != 3 {
		t.Fatalf("want 3 alive nodes (the rogue not among them), got %d: %v", alive, rep.GetNodes())
	}

	j := startJob(t, jobOptions{addr: h.addr, env: tlsEnv(driverTLS)}, clusterBin, "--min-nodes", "3", "--tasks", "12", "--darts", "200000", "--block-mib", "48")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("examples/cluster over TLS exited %d:\n%s", code, out)
	}
	wantLines(t, out, "cluster: 3 alive nodes", "OK")
	for _, n := range nodes {
		if !strings.Contains(out, n.id[:8]+" ran ") {
			t.Errorf("no sampling task ran on node %s:\n%s", n.id[:8], out)
		}
	}
	if !strings.Contains(out, "summed on") {
		t.Errorf("block transfer lines missing:\n%s", out)
	}
}
