package onesided

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Copies within a shared-memory domain. A fresh mapping costs a page table
// entry per 4 KiB page to set up and tear down, which for a one-off
// transfer costs more than the copy itself; so the copy avoids mapping
// what is not mapped already: a source of this agent is its registration
// (mapped once, at registration); a source of another agent is read
// through its file; a file destination is written through its file. The
// kernel copies between page cache and memory (pread, pwrite) or between
// two files (copy_file_range).

// copySrc is the source of one read: mapped bytes, or a file at off.
type copySrc struct {
	mem  []byte
	file *os.File
	off  int64
}

// copyAll copies every read of the request from its source, in chunks of
// chunk_size on up to min(streams, GOMAXPROCS) goroutines, checking the
// request's context between chunks.
func (x *Xfer) copyAll(srcs []copySrc) error {
	type chunk struct {
		read int
		off  int64
		n    int64
	}
	size := x.a.cfg.ChunkSize
	var chunks []chunk
	for i, rd := range x.desc.Reads {
		for off := int64(0); off < rd.Region.Length; off += size {
			chunks = append(chunks, chunk{read: i, off: off, n: min(size, rd.Region.Length-off)})
		}
	}
	var next atomic.Int64
	work := func() error {
		for {
			i := int(next.Add(1) - 1)
			if i >= len(chunks) {
				return nil
			}
			if err := x.ctx.Err(); err != nil {
				return err
			}
			c := chunks[i]
			if err := copyChunk(srcs[c.read], &x.desc.Reads[c.read], c.off, c.n); err != nil {
				return err
			}
			x.bytes.Add(c.n)
			x.a.bytesRead.Add(c.n)
		}
	}
	workers := min(x.a.cfg.Streams, runtime.GOMAXPROCS(0), len(chunks))
	if workers <= 1 {
		return work()
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = work()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// copyChunk copies bytes [off, off+n) of a read.
func copyChunk(s copySrc, d *Read, off, n int64) error {
	switch {
	case s.mem != nil && d.Dst != nil:
		copy(d.Dst[off:off+n], s.mem[off:off+n])
		return nil
	case s.mem != nil:
		return pwriteFull(d.DstFile, s.mem[off:off+n], d.DstOffset+off)
	case d.Dst != nil:
		return preadFull(s.file, d.Dst[off:off+n], s.off+off)
	}
	return copyFileRange(s.file, s.off+off, d.DstFile, d.DstOffset+off, n)
}

func preadFull(f *os.File, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := f.ReadAt(b, off)
		if n == 0 && err != nil {
			return fmt.Errorf("reading the source segment: %w", err)
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

func pwriteFull(f *os.File, b []byte, off int64) error {
	if _, err := f.WriteAt(b, off); err != nil {
		return fmt.Errorf("writing the destination: %w", err)
	}
	return nil
}

// bounce buffers for copies copy_file_range refuses.
var bounce = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// copyFileRange copies n bytes between two files in the kernel; where
// copy_file_range is not supported it copies through a buffer.
func copyFileRange(src *os.File, soff int64, dst *os.File, doff int64, n int64) error {
	sfd, dfd := int(src.Fd()), int(dst.Fd())
	for n > 0 {
		k, err := unix.CopyFileRange(sfd, &soff, dfd, &doff, int(min(n, 1<<30)), 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || k == 0 {
			if k == 0 && err == nil {
				return fmt.Errorf("copying between segments: %d bytes short (source truncated?)", n)
			}
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
				return bounceCopy(src, soff, dst, doff, n)
			}
			return fmt.Errorf("copying between segments: %w", err)
		}
		n -= int64(k)
	}
	runtime.KeepAlive(src)
	runtime.KeepAlive(dst)
	return nil
}

func bounceCopy(src *os.File, soff int64, dst *os.File, doff int64, n int64) error {
	bp := bounce.Get().(*[]byte)
	defer bounce.Put(bp)
	for n > 0 {
		b := (*bp)[:min(n, int64(len(*bp)))]
		if err := preadFull(src, b, soff); err != nil {
			return err
		}
		if err := pwriteFull(dst, b, doff); err != nil {
			return err
		}
		soff, doff, n = soff+int64(len(b)), doff+int64(len(b)), n-int64(len(b))
	}
	return nil
}
