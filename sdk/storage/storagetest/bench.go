package storagetest

import (
	"context"
	"crypto/rand"
	"io"
	"sync"
	"testing"

	"github.com/goray-dev/goray/sdk/storage"
)

// BenchmarkWriteRead runs two sub-benchmarks of s with objects of size
// bytes under key: "Write" writes the object (a cheap body, RepeatReader),
// "Read" reads it back to its end. Both report bytes per second (run them
// together: Read reads what Write wrote). A plugin benchmarks its binary
// through a client of it under a real plugin host:
//
//	func BenchmarkPlugin(b *testing.B) {
//		ctx := context.Background()
//		conn, v := host.Launch(ctx, b, pluginBin, "storage", "mystore", cfg)
//		s, _ := storagetest.PluginClient(ctx, b, conn, v, "mystore")
//		storagetest.BenchmarkWriteRead(b, s, "bench", 1<<30)
//	}
func BenchmarkWriteRead(b *testing.B, s storage.Storage, key string, size int64) {
	ctx := context.Background()
	b.Run("Write", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if _, err := s.Write(ctx, &storage.WriteRequest{Key: key, Size: size, Body: RepeatReader(size)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Read", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			r, err := s.Read(ctx, &storage.ReadRequest{Key: key, Length: storage.ToEnd})
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if err != nil || n != size {
				b.Fatalf("read %d bytes: %v", n, err)
			}
		}
	})
}

// repeatBlock is what RepeatReader repeats: storage.ChunkSize random
// bytes, drawn once.
var repeatBlock = sync.OnceValue(func() []byte {
	block := make([]byte, storage.ChunkSize)
	_, _ = rand.Read(block)
	return block
})

// RepeatReader returns a body of n bytes that repeats one block of random
// bytes: as cheap a body as there is, for benchmarks of a storage rather
// than of its input.
func RepeatReader(n int64) io.Reader {
	return &repeatReader{block: repeatBlock(), left: n}
}

// repeatReader yields left bytes copied from block over and over.
type repeatReader struct {
	block []byte
	off   int
	left  int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n := copy(p, r.block[r.off:])
	r.off = (r.off + n) % len(r.block)
	r.left -= int64(n)
	return n, nil
}
