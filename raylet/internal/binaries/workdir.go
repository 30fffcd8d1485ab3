package binaries

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/goray-dev/goray/internal/digest"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/workdir"
)

// WorkingDirError is a job whose shipped working directory this node
// cannot get or unpack, so none of its workers is started.
type WorkingDirError struct {
	// SHA256 is the archive's sha256 per the job.
	SHA256 string
	// Err says why.
	Err error
}

// Error names the archive and the cause.
func (e *WorkingDirError) Error() string {
	return fmt.Sprintf("the job's working dir (archive sha256 %s): %v", e.SHA256, e.Err)
}

// Unwrap returns the cause.
func (e *WorkingDirError) Unwrap() error { return e.Err }

// WorkingDir returns the directory unpacked from the job's working-dir
// archive (JobInfo.working_dir_sha256), making it once per sha256: the
// archive comes from the driver's file (working_dir_package) when the
// driver runs here, else from the driver's node (FetchBinary serves it
// from that node's cache, like a binary); it is kept in the cache as
// <sha256> and unpacked into working_dirs/<sha256>, which jobs with the
// same archive share. "" when the job ships none.
func (c *Cache) WorkingDir(ctx context.Context, info *gorayv1.JobInfo) (string, error) {
	sum := info.GetWorkingDirSha256()
	if sum == "" {
		return "", nil
	}
	local := ""
	if string(info.GetDriverNodeId()) == string(c.nodeID[:]) {
		local = info.GetWorkingDirPackage()
	}
	return c.UnpackedDir(ctx, sum, info.GetDriverNodeId(), local)
}

// UnpackedDir returns the directory unpacked from the working-dir archive
// with sha256 sum, making it once: the archive comes from the cache, else
// from the file local (on this node; "" for none), else from the raylet
// of node from.
func (c *Cache) UnpackedDir(ctx context.Context, sum string, from []byte, local string) (string, error) {
	if !digest.ValidSHA256(sum) {
		return "", &WorkingDirError{SHA256: sum, Err: fmt.Errorf("%q is not a sha256 (64 lowercase hexadecimal digits)", sum)}
	}
	key := "working_dir:" + sum
	for attempt := 0; ; attempt++ {
		f := c.once(key, func() (string, fileID, error) {
			dir, err := c.unpack(sum, from, local)
			if err != nil {
				err = &WorkingDirError{SHA256: sum, Err: err}
			}
			return dir, fileID{}, err
		})
		if err := f.wait(ctx); err != nil {
			return "", err
		}
		if st, err := os.Stat(f.path); (err == nil && st.IsDir()) || attempt > 0 {
			return f.path, nil
		}
		// Removed since it was unpacked: unpack it again.
		c.forget(key, f)
	}
}

// InstallWorkingDir copies the archive at path, written by a process of
// this node, into the cache as sum, unless the cache has it; its content
// must have that sha256.
func (c *Cache) InstallWorkingDir(sum, path string) error {
	if !digest.ValidSHA256(sum) {
		return &WorkingDirError{SHA256: sum, Err: fmt.Errorf("%q is not a sha256 (64 lowercase hexadecimal digits)", sum)}
	}
	if got, err := digest.FileSHA256(filepath.Join(c.dir, sum)); err == nil && got == sum {
		return nil
	}
	if err := c.installFile(sum, path); err != nil {
		return &WorkingDirError{SHA256: sum, Err: err}
	}
	return nil
}

// installFile copies the file at path into the cache as sum (Install).
func (c *Cache) installFile(sum, path string) error {
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	if _, err := c.Install(sum, src); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// unpack gets the archive sum into the cache and unpacks it.
func (c *Cache) unpack(sum string, from []byte, local string) (string, error) {
	dest := filepath.Join(c.dir, "working_dirs", sum)
	if st, err := os.Stat(dest); err == nil && st.IsDir() {
		return dest, nil
	}
	cached := filepath.Join(c.dir, sum)
	if got, err := digest.FileSHA256(cached); err != nil || got != sum {
		if err == nil {
			c.log.Warn("cached working dir archive is corrupt; fetching it again", "path", cached, "sha256", got)
			_ = os.Remove(cached)
		}
		switch {
		case local != "":
			// The archive a process of this node wrote.
			if err := c.installFile(sum, local); err != nil {
				return "", fmt.Errorf("the driver's archive: %w", err)
			}
		case string(from) == string(c.nodeID[:]):
			return "", fmt.Errorf("this node has no such archive (never installed, or removed)")
		default:
			if err := c.fetchFrom(from, sum, "working dir"); err != nil {
				return "", err
			}
		}
	}
	f, err := os.Open(cached)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := workdir.Extract(f, sum[:12], dest, workdir.Limits{}); err != nil {
		return "", err
	}
	c.log.Info("job working dir unpacked", "sha256", sum[:12], "dir", dest)
	c.pruneWorkingDirs(sum)
	return dest, nil
}

// KeepWorkingDirs is how many unpacked working dirs (and their archives)
// a node keeps beyond those of its registered jobs: the least recently
// unpacked go first.
const KeepWorkingDirs = 8

// SetInUse tells the cache which working dirs its node's jobs use: those
// are never pruned. Call it before the first WorkingDir.
func (c *Cache) SetInUse(inUse func(sum string) bool) { c.inUse = inUse }

// pruneWorkingDirs removes the unpacked working dirs (and archives) past
// KeepWorkingDirs, oldest first, keeping just and those in use.
func (c *Cache) pruneWorkingDirs(just string) {
	root := filepath.Join(c.dir, "working_dirs")
	entries, err := os.ReadDir(root)
	if err != nil || len(entries) <= KeepWorkingDirs {
		return
	}
	type dir struct {
		sum string
		mod int64
	}
	var dirs []dir
	for _, e := range entries {
		sum := e.Name()
		if !digest.ValidSHA256(sum) || sum == just || (c.inUse != nil && c.inUse(sum)) {
			continue
		}
		if info, err := e.Info(); err == nil {
			dirs = append(dirs, dir{sum, info.ModTime().UnixNano()})
		}
	}
	slices.SortFunc(dirs, func(a, b dir) int { return cmp.Compare(a.mod, b.mod) })
	for _, d := range dirs[:max(0, len(entries)-KeepWorkingDirs)] {
		c.mu.Lock()
		delete(c.fetches, "working_dir:"+d.sum)
		c.mu.Unlock()
		if err := os.RemoveAll(filepath.Join(root, d.sum)); err != nil {
			c.log.Warn("removing an old working dir", "sha256", d.sum[:12], "error", err)
			continue
		}
		_ = os.Remove(filepath.Join(c.dir, d.sum))
		c.log.Info("old job working dir removed", "sha256", d.sum[:12])
	}
}
