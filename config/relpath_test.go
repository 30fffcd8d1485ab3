package config

import (
	"os"
	"path/filepath"
	"testing"
)

// mustAbs is filepath.Abs for tests.
func mustAbs(t testing.TB, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestRelativePathsAbsolute: paths in a file read through a relative path
// come out absolute and relative to the file, so a process that hands
// them on (TLS files to workers, the Redis TLS files to the GCS process)
// hands paths that work from any directory. They came out relative to the
// reader's working directory ("conf/certs/ca.pem"), and workers, which run
// elsewhere, failed with "open conf/certs/ca.pem: no such file".
func TestRelativePathsAbsolute(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "conf")
	if err := os.MkdirAll(conf, 0o700); err != nil {
		t.Fatal(err)
	}
	src := `data_dir = "state"
auth { token_file = "secret/token" }
tls {
  ca_file   = "certs/ca.pem"
  cert_file = "certs/node1.pem"
  key_file  = "/abs/node1-key.pem"
}
gcs {
  redis {
    tls {
      ca_file = "certs/redis-ca.pem"
    }
  }
}
`
	if err := os.WriteFile(filepath.Join(conf, "node.hcl"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	n, diags := Load(filepath.Join("conf", "node.hcl"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for _, c := range []struct{ what, got, want string }{
		{"data_dir", n.DataDir, filepath.Join(conf, "state")},
		{"auth.token_file", n.Auth.TokenFile, filepath.Join(conf, "secret", "token")},
		{"tls.ca_file", n.TLS.CAFile, filepath.Join(conf, "certs", "ca.pem")},
		{"tls.cert_file", n.TLS.CertFile, filepath.Join(conf, "certs", "node1.pem")},
		{"tls.key_file", n.TLS.KeyFile, "/abs/node1-key.pem"},
		{"gcs.redis.tls.ca_file", n.GCS.Redis.TLS.CAFile, filepath.Join(conf, "certs", "redis-ca.pem")},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
		}
	}
}
