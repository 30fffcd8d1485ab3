package bench

// Spilling metrics (not Ray's): how fast a node spills objects to S3 and
// restores them, next to raw minio-go upload and download throughput to
// the same server in the same run. The server is a real MinIO started on
// loopback for the run (internal/testservers/minioserver: the pinned binary of
// `make tools`, or $GORAY_MINIO); the spilling node is started in this
// process, joining the cluster, with a small object store and this binary
// as its s3 storage plugin (see MaybeServeStoragePlugin).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/dustin/go-humanize"
	"github.com/minio/minio-go/v7"

	"github.com/goray-dev/goray/config"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/testservers/minioserver"
	"github.com/goray-dev/goray/plugins/s3/s3store"
	"github.com/goray-dev/goray/sdk/ray"
	"github.com/goray-dev/goray/sdk/storage"
)

// Names of the spilling limits and metrics.
const (
	// LimitS3Upload is raw minio-go PutObject throughput to the run's
	// MinIO server.
	LimitS3Upload = "s3_upload_bandwidth"
	// LimitS3Download is raw minio-go GetObject throughput from it.
	LimitS3Download = "s3_download_bandwidth"
	// MetricSpillS3 is the sustained rate of puts into a full object
	// store that spills to that server through the s3 plugin.
	MetricSpillS3 = "spill_to_s3"
	// MetricRestoreS3 is the rate of reads of spilled objects, each
	// restored from the server through the s3 plugin.
	MetricRestoreS3 = "restore_from_s3"
)

// S3PluginBinary is the name the node host looks for in its plugin_dir
// for `plugin "storage" "s3"`.
const S3PluginBinary = "goray-storage-s3"

// storagePluginHook records that the binary calls MaybeServeStoragePlugin.
var storagePluginHook atomic.Bool

// MaybeServeStoragePlugin serves goray's s3 storage plugin and never
// returns when this process was started under the name S3PluginBinary (the
// spilling metrics link the running binary under that name into a
// temporary plugin_dir, busybox style); otherwise it returns at once. Call
// it first thing in main, next to MaybeServeTransport.
func MaybeServeStoragePlugin() {
	storagePluginHook.Store(true)
	if filepath.Base(os.Args[0]) == S3PluginBinary {
		storage.Serve(s3store.New())
	}
}

// benchBucket is the bucket of the run's MinIO server.
const benchBucket = "goray-bench"

// s3Server is the run's MinIO server, started the first time a spilling
// workload needs it and closed at the end of the run.
type s3Server struct {
	once sync.Once
	srv  *minioserver.Server
	err  error
}

// s3 returns the run's MinIO server with its bucket, starting it on first
// use; a missing MinIO binary makes the workloads not available.
func (e *env) s3(ctx context.Context) (*minioserver.Server, error) {
	e.minio.once.Do(func() {
		if _, err := minioserver.Binary(); err != nil {
			e.minio.err = &notAvailableError{reason: "no MinIO server to measure against: " + err.Error()}
			return
		}
		srv, err := minioserver.Start(ctx, minioserver.Options{})
		if err != nil {
			e.minio.err = fmt.Errorf("starting MinIO: %w", err)
			return
		}
		if err := srv.CreateBucket(ctx, benchBucket); err != nil {
			srv.Close()
			e.minio.err = err
			return
		}
		e.minio.srv = srv
	})
	return e.minio.srv, e.minio.err
}

// closeS3 stops the run's MinIO server, if one was started.
func (e *env) closeS3() {
	if e.minio.srv != nil {
		e.minio.srv.Close()
	}
}

// s3ObjectSize is the size of the objects the spilling workloads move: a
// restore reads one, the spiller fuses two into a file (the raw limits
// upload a file's size and download an object's, so both see the same
// request sizes).
func (e *env) s3ObjectSize() int {
	if e.quick {
		return 8 << 20
	}
	return 32 << 20
}

// rawPutOptions are the upload options of the raw limit: the s3 plugin's
// default part size and concurrency.
func rawPutOptions() minio.PutObjectOptions {
	return minio.PutObjectOptions{PartSize: s3store.DefaultPartSize, NumThreads: s3store.DefaultConcurrency}
}

// s3Limits are the raw minio-go limits the spilling metrics compare with.
func (e *env) s3Limits() []workload {
	size := e.s3ObjectSize()
	file := 2 * size
	return []workload{
		{
			name: LimitS3Upload, unit: UnitGBps, mult: float64(file) / 1e9,
			note: fmt.Sprintf("raw minio-go PutObject of %s from memory (the size of a spill file; part size %s, %d parts in parallel: the s3 plugin's defaults) to a MinIO server started on loopback for this run, one key overwritten",
				humanize.IBytes(uint64(file)), humanize.IBytes(s3store.DefaultPartSize), s3store.DefaultConcurrency),
			setup: e.s3UploadSetup(file),
		},
		{
			name: LimitS3Download, unit: UnitGBps, mult: float64(size) / 1e9,
			note: fmt.Sprintf("raw minio-go GetObject of a %s object (the size a restore reads) from the same server, read whole into a buffer",
				humanize.IBytes(uint64(size))),
			setup: e.s3DownloadSetup(size),
		},
	}
}

// rawS3 is what the raw minio-go limits work with: a client of the run's
// MinIO, a filled size-byte value and a fresh key (name ++ random).
func (e *env) rawS3(ctx context.Context, name string, size int) (*minio.Client, []byte, string, error) {
	srv, err := e.s3(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	c, err := srv.Client()
	if err != nil {
		return nil, nil, "", err
	}
	blob := make([]byte, size)
	fill(blob)
	return c, blob, "raw/" + name + "-" + randomObjectID()[:12], nil
}

func (e *env) s3UploadSetup(size int) setupFunc {
	return func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
		c, blob, key, err := e.rawS3(ctx, "upload", size)
		if err != nil {
			return nil, nil, err
		}
		fn := func(ctx context.Context) error {
			_, err := c.PutObject(ctx, benchBucket, key, bytes.NewReader(blob), int64(size), rawPutOptions())
			return err
		}
		return fn, func(ctx context.Context) { _ = c.RemoveObject(ctx, benchBucket, key, minio.RemoveObjectOptions{}) }, nil
	}
}

func (e *env) s3DownloadSetup(size int) setupFunc {
	return func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
		c, blob, key, err := e.rawS3(ctx, "download", size)
		if err != nil {
			return nil, nil, err
		}
		if _, err := c.PutObject(ctx, benchBucket, key, bytes.NewReader(blob), int64(size), rawPutOptions()); err != nil {
			return nil, nil, err
		}
		buf := make([]byte, size)
		fill(buf)
		fn := func(ctx context.Context) error {
			o, err := c.GetObject(ctx, benchBucket, key, minio.GetObjectOptions{})
			if err != nil {
				return err
			}
			defer o.Close()
			if _, err := io.ReadFull(o, buf); err != nil {
				return err
			}
			if buf[size-1] != blob[size-1] {
				return fmt.Errorf("downloaded byte %d, want %d", buf[size-1], blob[size-1])
			}
			return nil
		}
		return fn, func(ctx context.Context) { _ = c.RemoveObject(ctx, benchBucket, key, minio.RemoveObjectOptions{}) }, nil
	}
}

// ------------------------------------------------------------ remote code

// spillPeer is an actor on the spilling node: it puts objects there (it
// owns them) and reads them back.
type spillPeer struct {
	blob []byte
	refs []ray.Ref[[]byte]
	next int
}

func newSpillPeer(context.Context) (*spillPeer, error) { return &spillPeer{}, nil }

// spillPeerArgs configures a spillPeer.
type spillPeerArgs struct {
	// Size is the size of every object.
	Size int
	// Keep is how many of the newest objects stay referenced; older ones
	// are released (they are spilled by then: Keep objects are several
	// times the store).
	Keep int
	// Put is how many objects to put at once.
	Put int
}

// prepare makes the value every object holds (every page written) and
// puts the first args.Put objects.
func (p *spillPeer) prepare(ctx context.Context, args spillPeerArgs) (int, error) {
	p.blob = make([]byte, args.Size)
	fill(p.blob)
	p.refs = make([]ray.Ref[[]byte], 0, args.Keep)
	for range args.Put {
		if _, err := p.put(ctx, args.Keep); err != nil {
			return 0, err
		}
	}
	return len(p.refs), nil
}

// put puts one object, releasing the oldest one when keep are held.
func (p *spillPeer) put(ctx context.Context, keep int) (int, error) {
	ref, err := ray.Put(ctx, p.blob)
	if err != nil {
		return 0, err
	}
	if len(p.refs) < keep {
		p.refs = append(p.refs, ref)
		return 1, nil
	}
	p.refs[p.next].Release()
	p.refs[p.next] = ref
	p.next = (p.next + 1) % keep
	return 1, nil
}

// read reads the next of its objects in turn (zero copy) and checks its
// last byte: with many more objects than the store holds, each read
// restores the object from storage.
func (p *spillPeer) read(ctx context.Context, _ int) (int, error) {
	if len(p.refs) == 0 {
		return 0, fmt.Errorf("no objects")
	}
	ref := p.refs[p.next]
	p.next = (p.next + 1) % len(p.refs)
	buf, err := ray.GetBuffer(ctx, ref)
	if err != nil {
		return 0, err
	}
	defer buf.Release()
	b := buf.Bytes()
	if len(b) != len(p.blob) || b[len(b)-1] != p.blob[len(b)-1] {
		return 0, fmt.Errorf("object %d of %d read back wrong (%d bytes)", (p.next+len(p.refs)-1)%len(p.refs), len(p.refs), len(b))
	}
	return len(b), nil
}

// release drops every object.
func (p *spillPeer) release(ctx context.Context) (int, error) {
	for _, r := range p.refs {
		r.Release()
	}
	n := len(p.refs)
	p.refs = nil
	return n, nil
}

var (
	spillPeerClass   = ray.Actor0(newSpillPeer)
	spillPeerPrepare = ray.Method1((*spillPeer).prepare)
	spillPeerPut     = ray.Method1((*spillPeer).put)
	spillPeerRead    = ray.Method1((*spillPeer).read)
	spillPeerRelease = ray.Method0((*spillPeer).release)
)

// ------------------------------------------------------------ metrics

// spillStoreObjects is how many objects the spilling node's store holds.
const spillStoreObjects = 8

// spillMetrics are the spilling metrics.
func (e *env) spillMetrics() []workload {
	size := e.s3ObjectSize()
	sz := humanize.IBytes(uint64(size))
	store := humanize.IBytes(uint64(spillStoreObjects * size))
	quick := ""
	if e.quick {
		quick = "; quick mode: smaller objects and store"
	}
	spill, restore := &spillRun{}, &spillRun{}
	return []workload{
		{
			name: MetricSpillS3, unit: UnitGBps, mult: float64(size) / 1e9,
			note: fmt.Sprintf("goray's own; nearest Ray workload: object spilling to S3 (smart_open) in Ray's release tests, not in ray microbenchmark; per call an actor on a node with a %s object store that spills to the run's MinIO through the s3 plugin (default threshold 0.8, files of ≥ %s) puts a fresh %s object and keeps the newest %d referenced, "+
				"so in steady state each put waits until spilling has made room; figure = object bytes ÷ time (GB = 10^9 bytes); ratio = ÷ %s%s",
				store, humanize.IBytes(uint64(2*size)), sz, 4*spillStoreObjects, LimitS3Upload, quick),
			limit: LimitS3Upload, ratio: func(mean, limit float64) float64 { return mean / limit },
			setup: e.spillSetup(size, false, spill), report: spill.report,
		},
		{
			name: MetricRestoreS3, unit: UnitGBps, mult: float64(size) / 1e9,
			note: fmt.Sprintf("goray's own; nearest Ray workload: restoring spilled objects from S3 in Ray's release tests; per call the actor reads the next of %d spilled %s objects in turn (zero copy; 3× what the store holds, so each read restores the object from MinIO through the s3 plugin); figure = object bytes ÷ time; ratio = ÷ %s%s",
				3*spillStoreObjects, sz, LimitS3Download, quick),
			limit: LimitS3Download, ratio: func(mean, limit float64) float64 { return mean / limit },
			setup: e.spillSetup(size, true, restore), report: restore.report,
		},
	}
}

// spillRun is the spilling node of a running spilling metric and its
// spill counters when the timed calls began.
type spillRun struct {
	node  *pluginNode
	start *gorayv1.SpillStats
}

// counters returns the node's spill counters.
func (r *spillRun) counters(ctx context.Context) (*gorayv1.SpillStats, error) {
	st, err := r.node.node.Stats(ctx)
	if err != nil {
		return nil, err
	}
	if st.GetSpill() == nil {
		return nil, fmt.Errorf("the node reports no spilling")
	}
	return st.GetSpill(), nil
}

// report describes what the node's own counters saw during the timed
// calls: the bytes written or read and the time the storage calls took.
func (r *spillRun) report(ctx context.Context) string {
	if r.node == nil || r.start == nil {
		return ""
	}
	end, err := r.counters(ctx)
	if err != nil {
		return "node counters: " + err.Error()
	}
	rate := func(bytes int64, secs float64) string {
		if secs <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.3g GB/s", float64(bytes)/secs/1e9)
	}
	spilled, spillSecs := end.SpilledBytes-r.start.SpilledBytes, end.SpillSeconds-r.start.SpillSeconds
	restored, restoreSecs := end.RestoredBytes-r.start.RestoredBytes, end.RestoreSeconds-r.start.RestoreSeconds
	return fmt.Sprintf("the node's counters from warm-up to the end: spilled %d objects (%s) in %.2f s of storage writes (%s), restored %d objects (%s) in %.2f s of storage reads (%s)",
		end.SpilledObjects-r.start.SpilledObjects, humanize.IBytes(uint64(spilled)), spillSecs, rate(spilled, spillSecs),
		end.RestoredObjects-r.start.RestoredObjects, humanize.IBytes(uint64(restored)), restoreSecs, rate(restored, restoreSecs))
}

// spillSetup starts a node whose store holds spillStoreObjects objects of
// size bytes and spills to the run's MinIO, and an actor there. Without
// restore a call puts an object; with restore the actor first puts 3× the
// store and a call reads one back. run records the node and its counters.
func (e *env) spillSetup(size int, restore bool, run *spillRun) setupFunc {
	return func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
		srv, err := e.s3(ctx)
		if err != nil {
			return nil, nil, err
		}
		body := fmt.Sprintf("endpoint = %q\nbucket = %q\nprefix = %q\ntls = false\naccess_key = %q\nsecret_key = %q\n",
			srv.Endpoint, benchBucket, "spill-"+randomObjectID()[:8], srv.AccessKey, srv.SecretKey)
		nd, err := startPluginNode(ctx, nodeSpec{
			cpus:       1,
			storeBytes: int64(spillStoreObjects * size),
			spilling:   &config.Spilling{Storage: "s3", MinFileSize: int64(2 * size)},
			plugins:    []pluginBlock{{kind: "storage", name: "s3", body: body}},
		})
		if err != nil {
			return nil, nil, err
		}
		peer := spillPeerClass.Options(ray.NodeAffinity(nd.id, false), ray.CPUs(0)).Remote(ctx)
		teardown := func(ctx context.Context) {
			_, _ = spillPeerRelease.On(peer).Remote(ctx).Get(ctx)
			_ = peer.Kill(ctx)
			nd.stop(ctx)
			run.node, run.start = nil, nil
		}
		args := spillPeerArgs{Size: size, Keep: 4 * spillStoreObjects, Put: 1}
		if restore {
			args.Keep, args.Put = 3*spillStoreObjects, 3*spillStoreObjects
		}
		if _, err := spillPeerPrepare.On(peer).Remote(ctx, ray.V(args)).Get(ctx); err != nil {
			teardown(ctx)
			return nil, nil, fmt.Errorf("preparing the objects: %w", err)
		}
		run.node = nd
		if run.start, err = run.counters(ctx); err != nil {
			teardown(ctx)
			return nil, nil, err
		}
		fn := func(ctx context.Context) error {
			_, err := spillPeerPut.On(peer).Remote(ctx, ray.V(args.Keep)).Get(ctx)
			return err
		}
		if restore {
			fn = func(ctx context.Context) error {
				_, err := spillPeerRead.On(peer).Remote(ctx, ray.V(0)).Get(ctx)
				return err
			}
		}
		return fn, teardown, nil
	}
}
