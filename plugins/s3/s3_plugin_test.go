package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/internal/testservers/miniotest"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/storage"
	"github.com/goray-dev/goray/sdk/storage/storagetest"
)

// pluginBin is the plugin binary, built once by TestMain.
var pluginBin string

func TestMain(m *testing.M) { os.Exit(host.RunWithPlugin(m, "goray-storage-s3", &pluginBin)) }

// launch starts the plugin binary through a real host, configured for the
// server's bucket, and returns a storage client of it and the plugin's pid.
func launch(t testing.TB, srv *miniotest.Server, bucket, extra string) (storage.Storage, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := fmt.Sprintf("endpoint = %q\nbucket = %q\ntls = false\naccess_key = %q\nsecret_key = %q\n%s",
		srv.Endpoint, bucket, srv.AccessKey, srv.SecretKey, extra)
	conn, v := host.Launch(ctx, t, pluginBin, "storage", "s3", cfg)
	return storagetest.PluginClient(ctx, t, conn, v, "s3")
}

// incompleteUploads lists the keys of the bucket's multipart uploads that
// were neither completed nor aborted.
func incompleteUploads(srv *miniotest.Server, bucket string) ([]string, error) {
	c, err := srv.Client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	var keys []string
	for u := range c.ListIncompleteUploads(ctx, bucket, "", true) {
		if u.Err != nil {
			return nil, u.Err
		}
		keys = append(keys, u.Key)
	}
	return keys, nil
}

// TestConformancePlugin runs the conformance suite through a real plugin
// process talking to a real MinIO server.
func TestConformancePlugin(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "spill")
	s, _ := launch(t, srv, "spill", `prefix = "plugin"`+"\n"+`part_size = "8MiB"`+"\n"+`timeout = "5s"`)
	storagetest.Run(t, func(t *testing.T) storage.Storage { return s }, storagetest.Options{
		// 1 GiB + 3 bytes: see s3store's tests.
		LargeSize: 1<<30 + 3,
		CheckNoLeftovers: func(*testing.T) error {
			left, err := incompleteUploads(srv, "spill")
			if err == nil && len(left) > 0 {
				err = fmt.Errorf("incomplete multipart uploads: %v", left)
			}
			return err
		},
		Break: func(t *testing.T) {
			srv.Stop()
			t.Cleanup(srv.Restart)
		},
	})
}

// TestConfigureErrorsThroughHost checks that Configure's errors reach the
// host with the plugin's message (wrong credentials, missing bucket).
func TestConfigureErrorsThroughHost(t *testing.T) {
	srv := miniotest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The plugin is configured for an existing bucket first; then the host
	// hands it bad blocks, as after an edit of the node's config.
	srv.CreateBucket(t, "spill")
	conn, _ := host.Launch(ctx, t, pluginBin, "storage", "s3", fmt.Sprintf("endpoint = %q\nbucket = \"spill\"\ntls = false\naccess_key = %q\nsecret_key = %q", srv.Endpoint, srv.AccessKey, srv.SecretKey))
	info := plugin.NewInfoClient(conn)
	err := info.Configure(ctx, map[string]any{"endpoint": srv.Endpoint, "bucket": "spill", "tls": false, "access_key": "AKIDNOPE", "secret_key": "hush-hush"})
	if !errors.Is(err, plugin.ErrConfigRejected) || !strings.Contains(err.Error(), `"AKIDNOPE"`) || strings.Contains(err.Error(), "hush-hush") {
		t.Errorf("wrong credentials: %v, want a rejection naming AKIDNOPE and not the secret", err)
	}
	err = info.Configure(ctx, map[string]any{"endpoint": srv.Endpoint, "bucket": "nothere", "tls": false, "access_key": srv.AccessKey, "secret_key": srv.SecretKey})
	if !errors.Is(err, plugin.ErrConfigRejected) || !strings.Contains(err.Error(), "create_bucket = true") {
		t.Errorf("missing bucket: %v, want a rejection that mentions create_bucket = true", err)
	}
}

// TestKillMidWrite kills the plugin (kill -9) in the middle of a multipart
// upload: the write fails with ErrUnavailable and the object never becomes
// readable.
func TestKillMidWrite(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "spill")
	s, pid := launch(t, srv, "spill", `part_size = "5MiB"`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const key = "sess/node-a/000001.spill"
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	storagetest.KillMidWrite(ctx, t, s, pid, key, storagetest.KillMidWriteOptions{
		Size:    64 << 20,
		StallAt: 30 << 20,
		// The upload has parts on the server.
		InProgress: func(ctx context.Context) bool {
			for u := range c.ListIncompleteUploads(ctx, "spill", key, true) {
				if u.Err != nil || u.Key != key {
					continue
				}
				parts, err := minio.Core{Client: c}.ListObjectParts(ctx, "spill", key, u.UploadID, 0, 100)
				if err == nil && len(parts.ObjectParts) > 0 {
					return true
				}
			}
			return false
		},
		Awaited: "part of the upload on the server",
	})
	if _, err := c.StatObject(ctx, "spill", key, minio.StatObjectOptions{}); s3Code(err) != "NoSuchKey" {
		t.Errorf("the interrupted object on the server: %v, want NoSuchKey", err)
	}
	s2, _ := launch(t, srv, "spill", "")
	if _, err := s2.Read(ctx, &storage.ReadRequest{Key: key, Length: storage.ToEnd}); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Read of the interrupted key through a fresh plugin: %v, want ErrNotFound", err)
	}
	// The dead plugin could not abort its upload: it stays incomplete
	// (invisible) until the bucket's lifecycle rule or MinIO's stale-upload
	// expiry removes it.
	left, _ := incompleteUploads(srv, "spill")
	t.Logf("incomplete uploads left by the killed plugin: %v", left)
}

func s3Code(err error) string {
	var r minio.ErrorResponse
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

// benchSize is the object the benchmarks move.
const benchSize = 1 << 30

// BenchmarkS3 compares writes and reads through a real plugin process
// (gRPC + minio-go) with minio-go's own PutObject/GetObject, against the
// same MinIO server:
//
//	go test -run '^$' -bench S3 -benchtime 3x ./plugins/s3
func BenchmarkS3(b *testing.B) {
	srv := miniotest.Start(b)
	srv.CreateBucket(b, "bench")
	s, _ := launch(b, srv, "bench", "")
	c, err := srv.Client()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("Plugin", func(b *testing.B) { storagetest.BenchmarkWriteRead(b, s, "plugin", benchSize) })
	b.Run("MinioGoPut", func(b *testing.B) {
		b.SetBytes(benchSize)
		for b.Loop() {
			if _, err := c.PutObject(ctx, "bench", "raw", storagetest.RepeatReader(benchSize), benchSize, minio.PutObjectOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("MinioGoGet", func(b *testing.B) {
		b.SetBytes(benchSize)
		for b.Loop() {
			o, err := c.GetObject(ctx, "bench", "raw", minio.GetObjectOptions{})
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, o)
			o.Close()
			if err != nil || n != benchSize {
				b.Fatalf("read %d bytes: %v", n, err)
			}
		}
	})
}
