package storagetest

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/storage"
)

// PluginClient checks a connection to a storage plugin process (conn, v
// as host.Launch returns them for a plugin binary under a real plugin
// host): that it negotiated storage.APIVersion and that the plugin reports
// itself as the storage plugin name. It returns a storage client of it and
// the plugin process' pid (for KillMidWrite). ctx bounds the Info call.
func PluginClient(ctx context.Context, t testing.TB, conn grpc.ClientConnInterface, v int, name string) (storage.Storage, int) {
	t.Helper()
	if v != storage.APIVersion {
		t.Fatalf("negotiated API version %d, want %d", v, storage.APIVersion)
	}
	info, err := plugin.NewInfoClient(conn).Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != plugin.KindStorage || info.Name != name {
		t.Fatalf("plugin says it is %s %q", info.Kind, info.Name)
	}
	return storage.NewClient(conn, v), info.Pid
}

// stallSeed seeds the bytes of StallingReader.
const stallSeed = 17

// StallingReader returns a body of size pseudo-random bytes that stalls
// after stall of them (a Read blocks) until release is closed, then yields
// the rest. A stall outside [0, size) never stalls.
func StallingReader(size, stall int64, release <-chan struct{}) io.Reader {
	r := newPattern(stallSeed, size)
	if stall < 0 || stall >= size {
		return r
	}
	return &hookBody{r: r, n: stall, hook: func() { <-release }}
}

// KillMidWriteOptions tune KillMidWrite. Zero fields take their defaults,
// except InProgress, which is required.
type KillMidWriteOptions struct {
	// Size is the size of the write (default 64 MiB).
	Size int64
	// StallAt is how many bytes the body yields before it stalls (default
	// 8 MiB): the plugin is killed while the body stalls. It must leave
	// the backend enough to show the write in progress (a multipart
	// upload needs more than one part).
	StallAt int64
	// InProgress reports whether the backend shows the write in progress:
	// a temporary file of some size, parts of a multipart upload. It is
	// polled every 20 ms until it is true or ctx ends.
	InProgress func(ctx context.Context) bool
	// Awaited says what InProgress waits for ("temporary file of 4 MiB"),
	// for the failure when it never comes ("... no temporary file of
	// 4 MiB").
	Awaited string
}

// killReturnWithin bounds how long a write may take to fail once its
// plugin was killed.
const killReturnWithin = 10 * time.Second

// KillMidWrite checks what a storage plugin's client does when the plugin
// process dies in the middle of a write: it writes o.Size bytes to key
// through s with a body that stalls after o.StallAt bytes
// (StallingReader), waits until o.InProgress sees the write in the
// backend, kills the process pid (SIGKILL), lets the body go on (the host
// keeps sending into the dead plugin's stream), and checks that the Write
// returns storage.ErrUnavailable within 10 s. ctx bounds the whole check.
// The caller then checks what the crash left in the backend and that the
// key never reads back.
func KillMidWrite(ctx context.Context, t testing.TB, s storage.Storage, pid int, key string, o KillMidWriteOptions) {
	t.Helper()
	if o.InProgress == nil {
		t.Fatal("storagetest.KillMidWrite: no KillMidWriteOptions.InProgress")
	}
	if o.Size <= 0 {
		o.Size = 64 << 20
	}
	if o.StallAt <= 0 {
		o.StallAt = 8 << 20
	}
	release := make(chan struct{})
	var once sync.Once
	resume := func() { once.Do(func() { close(release) }) }
	defer resume()
	done := make(chan error, 1)
	go func() {
		_, err := s.Write(ctx, &storage.WriteRequest{Key: key, Size: o.Size, Body: StallingReader(o.Size, o.StallAt, release)})
		done <- err
	}()
	for !o.InProgress(ctx) {
		select {
		case err := <-done:
			t.Fatalf("Write returned before the kill: %v", err)
		case <-ctx.Done():
			t.Fatalf("the write never showed in the backend: no %s", o.Awaited)
		case <-time.After(20 * time.Millisecond): // polling interval
		}
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	resume()
	timer := time.NewTimer(killReturnWithin)
	defer timer.Stop()
	select {
	case err := <-done:
		if !errors.Is(err, storage.ErrUnavailable) {
			t.Errorf("Write to a killed plugin: %v, want ErrUnavailable", err)
		}
	case <-timer.C:
		t.Fatalf("Write did not return within %v of the plugin's death", killReturnWithin)
	}
}
