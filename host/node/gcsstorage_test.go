package node

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/gcs"
)

// TestGCSStorageRedisTLS: the head hands its GCS process the Redis TLS
// settings as absolute paths (the key by path, never its bytes) in the
// spec's JSON, beside the address; the password stays out of it.
func TestGCSStorageRedisTLS(t *testing.T) {
	cfg := config.Default()
	cfg.Head = true
	cfg.GCS.Storage = config.GCSStorageRedis
	cfg.GCS.Redis = config.Redis{Address: "127.0.0.1:6380", Password: "pw-secret",
		TLS: config.RedisTLS{Enabled: true, CAFile: "certs/ca.pem", CertFile: "/abs/client.pem", KeyFile: "certs/client-key.pem", ServerName: "redis.example"}}
	st, err := gcsStorage(cfg, false, false)
	if err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	want := gcs.RedisTLS{CAFile: filepath.Join(wd, "certs/ca.pem"), CertFile: "/abs/client.pem", KeyFile: filepath.Join(wd, "certs/client-key.pem"), ServerName: "redis.example"}
	if st.RedisTLS == nil || *st.RedisTLS != want {
		t.Fatalf("RedisTLS = %+v, want %+v", st.RedisTLS, want)
	}
	b, err := json.Marshal(GCSSpec{Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	var back GCSSpec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Storage.RedisTLS == nil || *back.Storage.RedisTLS != want || strings.Contains(string(b), "pw-secret") {
		t.Errorf("spec JSON %s: TLS %+v", b, back.Storage.RedisTLS)
	}
	if s := st.String(); !strings.Contains(s, "TLS") {
		t.Errorf("String() = %q, want it to say TLS", s)
	}

	cfg.GCS.Redis.TLS = config.RedisTLS{}
	if st, err = gcsStorage(cfg, false, false); err != nil || st.RedisTLS != nil {
		t.Errorf("without TLS: %+v, %v", st.RedisTLS, err)
	}
}
