package logrotate

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkWrite compares writing a worker's output in the raylet's 64 KiB
// chunks to a plain file and through a Writer (which rotates every 64
// MiB here): rotation must cost the worker-output path nothing that
// matters.
func BenchmarkWrite(b *testing.B) {
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = 'x'
	}
	for _, bc := range []struct {
		name string
		open func(path string) io.WriteCloser
	}{
		{"file", func(path string) io.WriteCloser {
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}},
		{"rotating", func(path string) io.WriteCloser {
			return Open(path, Limits{MaxFileSize: 64 << 20, MaxFiles: 2})
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			w := bc.open(filepath.Join(b.TempDir(), "worker.out"))
			defer w.Close()
			b.SetBytes(int64(len(chunk)))
			for b.Loop() {
				if _, err := w.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
