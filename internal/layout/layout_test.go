package layout

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestModuleFollowsRules lists every package of the module and fails on
// each import that crosses the rules.
func TestModuleFollowsRules(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-e", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{join .TestImports \" \"}} {{join .XTestImports \" \"}}", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := parseList(string(out))
	if len(pkgs) < 40 {
		t.Fatalf("go list found %d packages; want the whole module", len(pkgs))
	}
	for _, v := range Check(Rules, pkgs) {
		t.Error(v)
	}
}

func parseList(out string) []Package {
	var pkgs []Package
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			continue
		}
		p := Package{Path: rel(f[0])}
		p.Imports = rels(strings.Fields(f[1]))
		p.TestImports = rels(strings.Fields(f[2]))
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func rel(path string) string {
	if path == Module {
		return "."
	}
	return strings.TrimPrefix(path, Module+"/")
}

func rels(paths []string) []string {
	var out []string
	for _, p := range paths {
		if strings.HasPrefix(p, Module+"/") {
			out = append(out, rel(p))
		}
	}
	return out
}

// TestCheck shows each rule refusing what it is there to refuse, and
// letting through what the tree does on purpose.
func TestCheck(t *testing.T) {
	tests := []struct {
		name      string
		pkg       Package
		wantBreak bool
	}{
		{"plugin imports the SDK", Package{Path: "plugins/s3/s3store", Imports: []string{"sdk/storage", "sdk/plugin"}}, false},
		{"plugin imports the raylet", Package{Path: "plugins/s3/s3store", Imports: []string{"raylet"}}, true},
		{"plugin SDK imports the core worker", Package{Path: "sdk/transport", Imports: []string{"sdk/ray/internal/core"}}, true},
		{"plugin SDK imports a protocol", Package{Path: "sdk/storage", Imports: []string{"internal/proto/storagev1"}}, false},
		{"plugin imports another plugin", Package{Path: "plugins/fs", Imports: []string{"plugins/s3/s3store"}}, true},
		{"plugin imports its own code", Package{Path: "plugins/fs", Imports: []string{"plugins/fs/fsstore"}}, false},
		{"sdk/ray imports the raylet", Package{Path: "sdk/ray", Imports: []string{"raylet"}}, true},
		{"core worker test runs a real GCS", Package{Path: "sdk/ray/internal/core", TestImports: []string{"gcs"}}, false},
		{"GCS test imports the raylet", Package{Path: "gcs", TestImports: []string{"raylet"}}, true},
		{"sdk/ray starts a node", Package{Path: "sdk/ray", Imports: []string{"host/node"}}, false},
		{"the node host runs the dashboard", Package{Path: "host/node", Imports: []string{"host/dashsvc"}}, true},
		{"the node host runs the autoscaler", Package{Path: "host/node", Imports: []string{"autoscaler"}}, true},
		{"sdk/ray reads the state", Package{Path: "sdk/ray", Imports: []string{"state"}}, true},
		{"sdk/ray requests resources", Package{Path: "sdk/ray", Imports: []string{"autoscaler/request"}}, false},
		{"the command runs the head's services", Package{Path: "cmd/goray", Imports: []string{"host/dashsvc", "host/autoscalersvc"}}, false},
		{"GCS imports the raylet", Package{Path: "gcs", Imports: []string{"raylet"}}, true},
		{"raylet imports the GCS", Package{Path: "raylet/internal/scheduling", Imports: []string{"gcs"}}, true},
		{"shared library imports the raylet", Package{Path: "internal/codec", Imports: []string{"raylet"}}, true},
		{"shared library imports the GCS", Package{Path: "internal/codec", Imports: []string{"gcs"}}, true},
		{"test GCS serves the GCS", Package{Path: "internal/testservers/gcstest", Imports: []string{"gcs"}}, false},
		{"test MinIO imports the GCS", Package{Path: "internal/testservers/miniotest", Imports: []string{"gcs"}}, true},
		{"runtime imports a test server", Package{Path: "host/node", Imports: []string{"internal/testservers/miniotest"}}, true},
		{"a test imports a test server", Package{Path: "plugins/s3", TestImports: []string{"internal/testservers/miniotest"}}, false},
		{"benchmark app runs a test server", Package{Path: "cmd/goray/internal/bench", Imports: []string{"internal/testservers/minioserver"}}, false},
		{"runtime imports an app", Package{Path: "host/node", Imports: []string{"cmd/goray/internal/bench"}}, true},
		{"app imports its own package", Package{Path: "cmd/goray", Imports: []string{"cmd/goray/internal/bench"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Check(Rules, []Package{tt.pkg})
			if (len(got) > 0) != tt.wantBreak {
				t.Errorf("Check = %v; want broken = %v", got, tt.wantBreak)
			}
		})
	}
}

// TestEmbeddingLinksNoHeadService: a program that imports sdk/ray (and
// with it the embedded node, host/node) links none of the head's services
// (the dashboard, the job API, the autoscaler, state), even indirectly:
// the import rules above see only direct imports.
func TestEmbeddingLinksNoHeadService(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "./sdk/ray", "./host/node")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderr.String())
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps found %d packages; want sdk/ray's whole closure", len(deps))
	}
	for _, d := range deps {
		// The GCS's Redis client: only `goray` (gcs/redisstore) links it.
		if strings.HasPrefix(d, "github.com/redis/") {
			t.Errorf("a program importing sdk/ray links %s", d)
		}
		p := rel(d)
		if p == "autoscaler/request" || !strings.HasPrefix(d, Module+"/") {
			continue
		}
		for _, head := range []string{"autoscaler", "dashboard", "state", "host/dashsvc", "host/autoscalersvc", "gcs/redisstore"} {
			if p == head || strings.HasPrefix(p, head+"/") {
				t.Errorf("a program importing sdk/ray links %s", p)
			}
		}
	}
}
