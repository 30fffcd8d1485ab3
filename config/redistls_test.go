package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/goray-dev/goray/internal/auth"
)

// redisTLSFiles makes a CA and a client certificate in dir and returns
// their paths.
func redisTLSFiles(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	if err := auth.CreateCA(dir, "test CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	cert, key, err := auth.IssueCert(dir, dir, "client", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, auth.CAFile), cert, key
}

// redisTLSHead is a head config keeping its GCS in Redis over TLS with
// the given tls block body.
func redisTLSHead(tlsBody string) string {
	return "head {}\ngcs {\n  storage = \"redis\"\n  redis {\n    address = \"redis.internal:6380\"\n    tls {\n" + tlsBody + "    }\n  }\n}\n"
}

// TestRedisTLSParse: the tls block is decoded, turns TLS on even empty,
// and its paths are relative to the config file; JSON works the same.
func TestRedisTLSParse(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := redisTLSFiles(t, filepath.Join(dir, "certs"))
	tests := []struct {
		name, file, src string
		want            RedisTLS
	}{
		{name: "all settings, relative to the file", file: "goray.hcl",
			src:  redisTLSHead("      ca_file     = \"certs/ca.pem\"\n      cert_file   = \"certs/client.pem\"\n      key_file    = \"certs/client-key.pem\"\n      server_name = \"redis.example\"\n"),
			want: RedisTLS{Enabled: true, CAFile: ca, CertFile: cert, KeyFile: key, ServerName: "redis.example"}},
		{name: "absolute paths", file: "goray.hcl",
			src:  redisTLSHead(fmt.Sprintf("      ca_file = %q\n", ca)),
			want: RedisTLS{Enabled: true, CAFile: ca}},
		{name: "empty block: the system's roots", file: "goray.hcl",
			src:  redisTLSHead(""),
			want: RedisTLS{Enabled: true}},
		{name: "no block", file: "goray.hcl",
			src:  "head {}\ngcs {\n  storage = \"redis\"\n  redis {\n    address = \"h:1\"\n  }\n}\n",
			want: RedisTLS{}},
		{name: "JSON", file: "goray.json",
			src:  `{"head": {}, "gcs": {"storage": "redis", "redis": {"address": "h:1", "tls": {"ca_file": "certs/ca.pem", "server_name": "h"}}}}`,
			want: RedisTLS{Enabled: true, CAFile: ca, ServerName: "h"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.file)
			writeFile(t, path, tc.src)
			n, diags := LoadWithFlags(path, Flags{})
			if len(diags) != 0 {
				t.Fatalf("LoadWithFlags: %v", diags)
			}
			if n.GCS.Redis.TLS != tc.want {
				t.Errorf("TLS = %+v, want %+v", n.GCS.Redis.TLS, tc.want)
			}
		})
	}
}

// TestRedisTLSDecodeErrors: mistakes in the tls block are reported at
// their line.
func TestRedisTLSDecodeErrors(t *testing.T) {
	for _, tc := range []gcsDiagCase{
		{name: "misspelt argument", src: redisTLSHead("      ca_fle = \"ca.pem\"\n"),
			summary: "Unsupported argument", line: 7, want: []string{`Did you mean "ca_file"?`}},
		{name: "not a string", src: redisTLSHead("      server_name = 3\n"),
			summary: "Incorrect attribute value type", line: 7, want: []string{`"server_name"`, "a string is required"}},
		{name: "duplicate tls block", src: "head {}\ngcs {\n  redis {\n    tls {}\n    tls {}\n  }\n}\n",
			summary: "Duplicate tls block", line: 5, want: []string{"goray.hcl:4"}},
		{name: "misspelt block", src: "head {}\ngcs {\n  redis {\n    tsl {}\n  }\n}\n",
			summary: "Unsupported block type", line: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.severity = hcl.DiagError
			_, diags := Parse([]byte(tc.src), "goray.hcl")
			checkGCSDiag(t, diags, tc)
		})
	}
}

// TestRedisTLSValidate: each bad TLS setting of the head's Redis is an
// error at its line (or naming its environment variable), saying what is
// wrong with which file.
func TestRedisTLSValidate(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := redisTLSFiles(t, dir)
	notPEM := filepath.Join(dir, "not.pem")
	writeFile(t, notPEM, "hello")
	openKey := filepath.Join(dir, "open-key.pem")
	b, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, openKey, string(b))
	if err := os.Chmod(openKey, 0o644); err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := auth.IssueCert(dir, dir, "other", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	q := func(k, v string) string { return fmt.Sprintf("      %s = %q\n", k, v) }
	tests := []gcsDiagCase{
		{name: "missing CA", src: redisTLSHead(q("ca_file", missing)),
			summary: "Redis TLS file not found", line: 7, want: []string{"gcs.redis.tls.ca_file", missing, "no such file"}},
		{name: "CA is a directory", src: redisTLSHead(q("ca_file", dir)),
			summary: "Invalid Redis TLS file", line: 7, want: []string{dir, "directory"}},
		{name: "CA holds no certificate", src: redisTLSHead(q("ca_file", notPEM)),
			summary: "Invalid Redis TLS file", line: 7, want: []string{notPEM, "no PEM certificate"}},
		{name: "key without a certificate", src: redisTLSHead(q("ca_file", ca) + q("key_file", key)),
			summary: "Redis TLS key without a certificate", line: 8, want: []string{"cert_file", EnvGCSRedisTLSCertFile}},
		{name: "certificate without a key", src: redisTLSHead(q("cert_file", cert)),
			summary: "Redis TLS certificate without a key", line: 7, want: []string{"key_file", EnvGCSRedisTLSKeyFile}},
		{name: "missing key", src: redisTLSHead(q("cert_file", cert) + q("key_file", missing)),
			summary: "Redis TLS file not found", line: 8, want: []string{"gcs.redis.tls.key_file", missing}},
		{name: "missing certificate", src: redisTLSHead(q("cert_file", missing) + q("key_file", key)),
			summary: "Redis TLS file not found", line: 7, want: []string{"gcs.redis.tls.cert_file", missing}},
		{name: "key readable by others", src: redisTLSHead(q("cert_file", cert) + q("key_file", openKey)),
			summary: "Redis TLS key readable by others", line: 8, want: []string{openKey, "0644", "chmod 600"}},
		{name: "key of another certificate", src: redisTLSHead(q("cert_file", cert) + q("key_file", otherKey)),
			summary: "Invalid Redis TLS certificate", line: 7, want: []string{cert, otherKey, "does not match"}},
		{name: "certificate not PEM", src: redisTLSHead(q("cert_file", notPEM) + q("key_file", key)),
			summary: "Invalid Redis TLS certificate", line: 7, want: []string{notPEM}},
		{name: "server name with a space", src: redisTLSHead(q("server_name", "redis internal")),
			summary: "Invalid Redis TLS server name", line: 7, want: []string{`"redis internal"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.severity = hcl.DiagError
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			if diags.HasErrors() {
				t.Fatalf("Parse: %v", diags)
			}
			checkGCSDiag(t, n.Validate(), tc)
		})
	}

	// What is fine: no diagnostics.
	for _, src := range []string{
		redisTLSHead(""),
		redisTLSHead(q("ca_file", ca)),
		redisTLSHead(q("ca_file", ca) + q("cert_file", cert) + q("key_file", key) + q("server_name", "localhost")),
	} {
		if _, vd := validateSrc(t, src); len(vd) != 0 {
			t.Errorf("%s: %v", src, vd)
		}
	}
	// Files are only checked where they are used: a worker node (or a
	// head keeping its GCS elsewhere) is only warned about the block.
	for _, src := range []string{
		"address = \"10.0.0.1:6380\"\ngcs {\n  redis {\n    tls {\n" + q("ca_file", missing) + "    }\n  }\n}\n",
		"head {}\ngcs {\n  storage = \"bolt\"\n  redis {\n    tls {\n" + q("ca_file", missing) + "    }\n  }\n}\n",
	} {
		if _, vd := validateSrc(t, src); vd.HasErrors() {
			t.Errorf("%s: %v", src, vd)
		}
	}

	// From the environment: the error names the variable.
	n, diags := Parse([]byte("head {}\ngcs {\n  storage = \"redis\"\n  redis {\n    address = \"h:1\"\n  }\n}\n"), "goray.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	n.ApplyEnv(envMap(map[string]string{EnvGCSRedisTLSCAFile: missing}))
	checkGCSDiag(t, n.Validate(), gcsDiagCase{severity: hcl.DiagError, summary: "Redis TLS file not found",
		want: []string{"$" + EnvGCSRedisTLSCAFile, missing}})
}

// TestRedisTLSApplyEnv: the TLS variables fill what the file leaves
// empty, setting by setting, and any of them turns TLS on.
func TestRedisTLSApplyEnv(t *testing.T) {
	env := map[string]string{
		EnvGCSRedisTLSCAFile:     "/env/ca.pem",
		EnvGCSRedisTLSCertFile:   "/env/cert.pem",
		EnvGCSRedisTLSKeyFile:    "/env/key.pem",
		EnvGCSRedisTLSServerName: "env.example",
	}
	tests := []struct {
		name string
		src  string
		env  map[string]string
		want RedisTLS
	}{
		{name: "env alone", env: env,
			want: RedisTLS{Enabled: true, CAFile: "/env/ca.pem", CertFile: "/env/cert.pem", KeyFile: "/env/key.pem", ServerName: "env.example"}},
		{name: "one variable turns TLS on", env: map[string]string{EnvGCSRedisTLSServerName: "only.example"},
			want: RedisTLS{Enabled: true, ServerName: "only.example"}},
		{name: "no variables", env: map[string]string{EnvGCSRedisAddress: "h:1"}, want: RedisTLS{}},
		{name: "empty variables are unset", env: map[string]string{EnvGCSRedisTLSCAFile: ""}, want: RedisTLS{}},
		{name: "the file wins, setting by setting",
			src: "gcs {\n  redis {\n    tls {\n      ca_file = \"/file/ca.pem\"\n      server_name = \"file.example\"\n    }\n  }\n}\n", env: env,
			want: RedisTLS{Enabled: true, CAFile: "/file/ca.pem", CertFile: "/env/cert.pem", KeyFile: "/env/key.pem", ServerName: "file.example"}},
		{name: "an empty block with no variables", src: "gcs {\n  redis {\n    tls {}\n  }\n}\n",
			want: RedisTLS{Enabled: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			n.ApplyEnv(envMap(tc.env))
			if n.GCS.Redis.TLS != tc.want {
				t.Errorf("TLS = %+v, want %+v", n.GCS.Redis.TLS, tc.want)
			}
		})
	}
}

// TestRedisTLSInClusterFile: a cluster file's gcs block carries the tls
// block to the head, with the environment filling what it leaves out.
func TestRedisTLSInClusterFile(t *testing.T) {
	dir := t.TempDir()
	ca, _, _ := redisTLSFiles(t, filepath.Join(dir, "certs"))
	src := `cluster_name = "c"
head_node_type = "head"
node_type "head" {
  resources = { CPU = 1 }
}
provider "local" {}
gcs {
  storage = "redis"
  redis {
    address = "redis.internal:6380"
    tls {
      ca_file = "certs/ca.pem"
    }
  }
}
`
	c, diags := parseCluster([]byte(src), filepath.Join(dir, "cluster.hcl"), envMap(map[string]string{EnvGCSRedisTLSServerName: "redis.example"}))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if got, want := c.Head.GCS.Redis.TLS, (RedisTLS{Enabled: true, CAFile: ca, ServerName: "redis.example"}); got != want {
		t.Errorf("head TLS = %+v, want %+v", got, want)
	}
}

// TestRedisTLSString: the TLS settings show (paths are not secret), the
// password still does not.
func TestRedisTLSString(t *testing.T) {
	r := Redis{Address: "h:1", Password: "pw-123", TLS: RedisTLS{Enabled: true, CAFile: "/c/ca.pem", KeyFile: "/c/key.pem", ServerName: "h"}}
	for _, s := range []string{r.String(), fmt.Sprintf("%#v", r), fmt.Sprint(GCS{Redis: r})} {
		if strings.Contains(s, "pw-123") || !strings.Contains(s, "/c/ca.pem") || !strings.Contains(s, `server_name="h"`) {
			t.Errorf("%q", s)
		}
	}
	if s := (Redis{Address: "h:1"}).String(); strings.Contains(s, "tls") {
		t.Errorf("TLS shows as on: %q", s)
	}
}
