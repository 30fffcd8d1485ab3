package raylet

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/internal/digest"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/raylet/internal/binaries"
)

// BinaryHashError reports a job whose binary this node cannot find with
// the sha256 the job names, so none of its workers is started.
type BinaryHashError = binaries.HashError

// chunkSize is the size of one FetchBinary message.
const chunkSize = 1 << 20

// job is a registered driver (or, remote, a job of another node's driver
// whose workers run here). The fields other than ready and finished never
// change once the job is in the table.
type job struct {
	id         ids.ID
	info       *gorayv1.JobInfo
	driverID   ids.ID
	driverAddr *gorayv1.Address
	driverPID  int32
	// remote marks the job of a driver on another node: it has no session
	// here and ends when the GCS says it finished.
	remote bool
	out    *outbox // to the driver's session stream (nil when remote)

	ready    atomic.Bool // registered with the GCS and answered
	finished atomic.Bool // set once, first thing when the job ends
}

// jobTable is the node's job table and its cache of checked job binaries.
//
// mu guards jobs and closed. Jobs' ready and finished flags are atomic
// (any component may read them); binaries has its own lock.
type jobTable struct {
	nodeID   ids.ID
	log      hclog.Logger
	binaries *binaries.Cache

	mu     sync.RWMutex
	closed bool
	jobs   map[ids.ID]*job
}

func newJobTable(nodeID ids.ID, log hclog.Logger, bins *binaries.Cache) *jobTable {
	return &jobTable{nodeID: nodeID, log: log, binaries: bins, jobs: map[ids.ID]*job{}}
}

// usesWorkingDir tells whether a registered job ships the working dir
// with sha256 sum (the cache never prunes it).
func (t *jobTable) usesWorkingDir(sum string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, j := range t.jobs {
		if j.info.GetWorkingDirSha256() == sum {
			return true
		}
	}
	return false
}

// lookup returns the job id (nil when this node does not know it). A job
// registered but not ready yet is a JobNotFoundError, and so is every job
// once the table is closed (the caller checks for shutdown first).
func (t *jobTable) lookup(id ids.ID) (*job, error) {
	t.mu.RLock()
	j, closed := t.jobs[id], t.closed
	t.mu.RUnlock()
	if closed {
		return nil, ErrShuttingDown
	}
	if j != nil && !j.ready.Load() {
		return nil, &JobNotFoundError{Job: id}
	}
	return j, nil
}

// reserve adds a job that is not ready yet.
func (t *jobTable) reserve(j *job) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrShuttingDown
	}
	if _, dup := t.jobs[j.id]; dup {
		return status.Errorf(codes.AlreadyExists, "job %s is already registered on this node", j.id)
	}
	t.jobs[j.id] = j
	return nil
}

// remove drops j from the table (when it is still there).
func (t *jobTable) remove(j *job) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.jobs[j.id] == j {
		delete(t.jobs, j.id)
	}
}

// finish marks j finished and removes it; it reports false when j had
// already finished.
func (t *jobTable) finish(j *job) bool {
	if j.finished.Swap(true) {
		return false
	}
	t.remove(j)
	return true
}

// addRemote registers the job of another node's driver, or returns the
// one registered meanwhile.
func (t *jobTable) addRemote(id ids.ID, info *gorayv1.JobInfo) (*job, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrShuttingDown
	}
	if j := t.jobs[id]; j != nil {
		return j, nil
	}
	j := &job{id: id, info: info, remote: true}
	j.ready.Store(true)
	t.jobs[id] = j
	return j, nil
}

// remote returns the jobs of other nodes' drivers.
func (t *jobTable) remote() []*job {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []*job
	for _, j := range t.jobs {
		if j.remote {
			out = append(out, j)
		}
	}
	return out
}

// get returns the job id, ready or not (nil when unknown).
func (t *jobTable) get(id ids.ID) *job {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.jobs[id]
}

// push queues a command for every running driver of the node but skip
// (make builds one message per stream: streams marshal concurrently).
func (t *jobTable) push(skip ids.ID, make func() *gorayv1.RayletCommand) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, j := range t.jobs {
		if j.ready.Load() && !j.finished.Load() && j.out != nil && j.driverID != skip {
			j.out.push(make())
		}
	}
}

// isDriver reports whether id is the driver of a running job.
func (t *jobTable) isDriver(id ids.ID) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, j := range t.jobs {
		if j.driverID == id && !j.finished.Load() {
			return true
		}
	}
	return false
}

// drivers returns the addresses of the ready drivers.
func (t *jobTable) drivers() []*gorayv1.Address {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []*gorayv1.Address
	for _, j := range t.jobs {
		if j.ready.Load() && j.driverAddr != nil {
			out = append(out, proto.Clone(j.driverAddr).(*gorayv1.Address))
		}
	}
	return out
}

// close refuses later registrations.
func (t *jobTable) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
}

// binaryPath returns the checked local path of the job's binary.
func (t *jobTable) binaryPath(ctx context.Context, info *gorayv1.JobInfo) (string, error) {
	return t.binaries.Path(ctx, info)
}

// workingDir returns the directory unpacked from the job's shipped working
// dir ("" when it ships none).
func (t *jobTable) workingDir(ctx context.Context, info *gorayv1.JobInfo) (string, error) {
	return t.binaries.WorkingDir(ctx, info)
}

// leaseDir returns the directory unpacked from the working dir a lease
// names (sum, on the raylet of node from).
func (t *jobTable) leaseDir(ctx context.Context, sum string, from ids.ID) (string, error) {
	return t.binaries.UnpackedDir(ctx, sum, from.Bytes(), "")
}

// installWorkingDir copies an archive a local process wrote into the cache.
func (t *jobTable) installWorkingDir(sum, path string) error {
	return t.binaries.InstallWorkingDir(sum, path)
}

// binarySources lists the files that may hold the binary with sha256 sum:
// local jobs' binaries (and their running drivers' executables) and the
// cache.
func (t *jobTable) binarySources(sum string) []string {
	var paths []string
	t.mu.RLock()
	for _, j := range t.jobs {
		if j.info.GetBinarySha256() == sum {
			paths = append(paths, j.info.GetBinaryPath())
			if !j.remote && j.driverPID > 0 {
				// The running driver's executable, even if its file was
				// replaced or removed since.
				paths = append(paths, fmt.Sprintf("/proc/%d/exe", j.driverPID))
			}
		}
	}
	t.mu.RUnlock()
	return append(paths, filepath.Join(t.binaries.Dir(), sum))
}

// sendBinary streams the binary with sha256 sum from the first of the
// node's sources that still has that content.
func (t *jobTable) sendBinary(sum string, send func(*gorayv1.BinaryChunk) error) error {
	for _, p := range t.binarySources(sum) {
		if got, err := digest.FileSHA256(p); err != nil || got != sum {
			continue // gone, or replaced by another build
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			continue
		}
		buf := make([]byte, chunkSize)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				if err := send(&gorayv1.BinaryChunk{Data: buf[:n], Size: st.Size()}); err != nil {
					return err
				}
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return status.Errorf(codes.Internal, "reading %s: %v", p, err)
			}
		}
	}
	return status.Errorf(codes.NotFound, "node %s has no binary with sha256 %s", t.nodeID.Short(), sum)
}
