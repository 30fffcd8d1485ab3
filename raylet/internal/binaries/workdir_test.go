package binaries

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/workdir"
)

// archiveOf packs a directory holding files.
func archiveOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	src := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := workdir.Pack(src, nil, workdir.Limits{}, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestWorkingDirFetchedAndUnpacked: a job's working dir comes from the
// driver's archive when the driver is local and from the driver's node
// otherwise, is unpacked once per sha256, and an archive whose content is
// not the job's sha256 is refused with a *WorkingDirError.
func TestWorkingDirFetchedAndUnpacked(t *testing.T) {
	archive := archiveOf(t, map[string]string{"cfg.txt": "shipped"})
	driverNode, self := ids.New(), ids.New()
	for _, tt := range []struct {
		name    string
		local   bool
		content []byte // the archive the driver has
		want    string
		wantErr string
	}{
		{"from the driver's node", false, archive, sum(archive), ""},
		{"from the local driver's file", true, archive, sum(archive), ""},
		{"wrong content is refused", false, []byte("other"), sum(archive), "want " + sum(archive)},
		{"not a sha256", false, archive, "../../etc", "is not a sha256"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			peer := &fakeRaylet{content: tt.content}
			c := New(filepath.Join(dir, "cache"), self, hclog.NewNullLogger(), func(node ids.ID) (gorayv1.RayletClient, error) {
				if node != driverNode {
					return nil, errors.New("not the driver's node")
				}
				return peer, nil
			})
			pkg := filepath.Join(dir, "driver.tar.gz")
			if err := os.WriteFile(pkg, tt.content, 0o600); err != nil {
				t.Fatal(err)
			}
			info := &gorayv1.JobInfo{JobId: ids.New().Bytes(), WorkingDirSha256: tt.want, WorkingDirPackage: pkg, DriverNodeId: driverNode.Bytes()}
			if tt.local {
				info.DriverNodeId = self.Bytes()
			}
			for range 2 { // the second time from the cache
				wd, err := c.WorkingDir(context.Background(), info)
				if tt.wantErr != "" {
					var we *WorkingDirError
					if !errors.As(err, &we) || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("WorkingDir = %q, %v; want a *WorkingDirError with %q", wd, err, tt.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if b, err := os.ReadFile(filepath.Join(wd, "cfg.txt")); err != nil || string(b) != "shipped" {
					t.Fatalf("unpacked %s: %q, %v", wd, b, err)
				}
			}
			if want := map[bool]int{true: 0, false: 1}[tt.local]; peer.calls != want {
				t.Errorf("fetched %d times, want %d", peer.calls, want)
			}
		})
	}
	// A job without a working dir has none.
	c := New(t.TempDir(), self, hclog.NewNullLogger(), nil)
	if wd, err := c.WorkingDir(context.Background(), &gorayv1.JobInfo{}); wd != "" || err != nil {
		t.Errorf("WorkingDir of a job shipping none: %q, %v", wd, err)
	}
}

// TestWorkingDirsPruned: past KeepWorkingDirs the oldest unpacked dirs go,
// with their archives, but never one a registered job uses nor the one
// just unpacked.
func TestWorkingDirsPruned(t *testing.T) {
	dir := t.TempDir()
	c := New(dir, ids.New(), hclog.NewNullLogger(), nil)
	var sums []string
	base := time.Now().Add(-time.Hour)
	for i := range KeepWorkingDirs + 3 {
		s := sum([]byte{byte(i)})
		sums = append(sums, s)
		wd := filepath.Join(dir, "working_dirs", s)
		if err := os.MkdirAll(wd, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, s), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		at := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(wd, at, at); err != nil {
			t.Fatal(err)
		}
	}
	// The oldest is in use and the second oldest was just unpacked: the
	// next three oldest go.
	c.SetInUse(func(s string) bool { return s == sums[0] })
	c.pruneWorkingDirs(sums[1])
	for i, s := range sums {
		_, err := os.Stat(filepath.Join(dir, "working_dirs", s))
		_, aerr := os.Stat(filepath.Join(dir, s))
		gone := i >= 2 && i < 5
		if gone != os.IsNotExist(err) || gone != os.IsNotExist(aerr) {
			t.Errorf("working dir %d (gone: %v): dir %v, archive %v", i, gone, err, aerr)
		}
	}
}
