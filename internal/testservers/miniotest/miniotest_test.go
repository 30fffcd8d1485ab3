package miniotest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

func TestStartStopRestart(t *testing.T) {
	var pid int
	t.Run("server", func(t *testing.T) {
		s := Start(t)
		pid = s.Pid()
		if !s.Running() || pid == 0 {
			t.Fatal("not running after Start")
		}
		s.CreateBucket(t, "bucket-a")
		c, err := s.Client()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := c.PutObject(ctx, "bucket-a", "k", bytes.NewReader([]byte("hello")), 5, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}

		s.Stop()
		if s.Running() {
			t.Fatal("running after Stop")
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("the process %d is still there after Stop: %v", pid, err)
		}
		if resp, err := http.Get("http://" + s.Endpoint + "/minio/health/live"); err == nil {
			resp.Body.Close()
			t.Fatal("the server answers after Stop")
		}
		s.Stop() // idempotent

		s.Restart()
		if s.Pid() == pid {
			t.Error("same pid after Restart")
		}
		pid = s.Pid()
		obj, err := c.GetObject(ctx, "bucket-a", "k", minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(obj)
		obj.Close()
		if err != nil || string(b) != "hello" {
			t.Fatalf("after Restart the object reads %q, %v", b, err)
		}
	})
	// The subtest's cleanup killed the server.
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the process %d outlived its test: %v", pid, err)
	}
}

func TestTwoServers(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Endpoint == b.Endpoint || a.AccessKey == b.AccessKey || a.SecretKey == b.SecretKey {
		t.Errorf("two servers share an endpoint or credentials: %+v %+v", a, b)
	}
}

func TestBinary(t *testing.T) {
	p, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(p) != "minio" {
		t.Errorf("Binary() = %s", p)
	}
	t.Setenv(EnvBinary, filepath.Join(t.TempDir(), "nope"))
	if _, err := Binary(); err == nil || !strings.Contains(err.Error(), EnvBinary) {
		t.Errorf("a missing $%s: %v", EnvBinary, err)
	}
	t.Setenv(EnvBinary, "")
	// Outside any module the error says how to get the binary.
	t.Chdir(t.TempDir())
	if _, err := Binary(); err == nil || !strings.Contains(err.Error(), EnvBinary) {
		t.Errorf("outside a module: %v", err)
	}
	// In a module without the binary, the error says to run make tools.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	_, err = Binary()
	if err == nil || !strings.Contains(err.Error(), "make tools") || !strings.Contains(err.Error(), filepath.Join(dir, ".tools", "minio")) {
		t.Errorf("without the binary: %v, want an error naming %s and `make tools`", err, filepath.Join(dir, ".tools", "minio"))
	}
}
