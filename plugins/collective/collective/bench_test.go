package collective_test

import (
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/goray-dev/goray/plugins/collective/collective"
	"github.com/goray-dev/goray/sdk/transport"
)

// BenchmarkAllReduce measures all-reduce (float32 sum) between ranks of
// this process: links=tcp, each rank on its own instance, over real TCP
// loopback (as ranks on n nodes); links=inproc, every rank on one instance
// (as ranks on one node): algorithm = auto reduces in memory from every
// rank's tensor (execLocal); links=inproc-ring, the same ranks on the ring
// over in-process links. Sizes up to 64 KiB run by recursive doubling
// (but on inproc-ring).
// Metrics, in the style of nccl-tests: algbw = bytes / time per call, and
// busbw = algbw × 2(n−1)/n, the bandwidth each rank's links carry, to
// compare with BenchmarkLoopbackTCP. Every rank shares the machine's cores,
// so reductions and the kernel's copies compete with each other.
func BenchmarkAllReduce(b *testing.B) {
	for _, links := range []string{"tcp", "inproc-ring", "inproc"} {
		algo := collective.AlgorithmAuto
		if links == "inproc-ring" {
			algo = collective.AlgorithmRing
		}
		for _, n := range []int{2, 4} {
			for _, size := range []int64{4 << 10, 1 << 20, 64 << 20, 256 << 20} {
				b.Run(fmt.Sprintf("links=%s/ranks=%d/size=%s", links, n, sizeName(size)), func(b *testing.B) {
					benchAllReduce(b, links != "tcp", algo, n, size)
				})
			}
		}
	}
}

func sizeName(size int64) string {
	if size < 1<<20 {
		return fmt.Sprintf("%dKiB", size>>10)
	}
	return fmt.Sprintf("%dMiB", size>>20)
}

// BenchmarkAllReduceSmall compares the two algorithms on small tensors:
// the crossover of algorithm = auto (recursive_doubling_max).
func BenchmarkAllReduceSmall(b *testing.B) {
	for _, links := range []string{"tcp", "inproc"} {
		for _, n := range []int{2, 3, 4} {
			for _, size := range []int64{4 << 10, 64 << 10, 256 << 10, 1 << 20} {
				for _, algo := range []string{collective.AlgorithmRing, collective.AlgorithmRecursiveDoubling} {
					b.Run(fmt.Sprintf("links=%s/ranks=%d/size=%s/%s", links, n, sizeName(size), algo), func(b *testing.B) {
						benchAllReduce(b, links == "inproc", algo, n, size)
					})
				}
			}
		}
	}
}

func benchAllReduce(b *testing.B, shared bool, algo string, n int, size int64) {
	cfg := testConfig()
	cfg.ChunkSize = 1 << 20
	cfg.Algorithm = algo
	opts := []worldOpt{withConfig(cfg)}
	if shared {
		opts = append(opts, sharedInstance())
	}
	w := newWorld(b, n, opts...)
	tensors := make([]transport.Tensor, n)
	for r := range n {
		tensors[r] = newTensor(b, transport.Float32, size/4)
	}
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		w.each(func(r int) error {
			_, err := w.ranks[r].AllReduce(ctxT(b), &transport.AllReduceRequest{Group: w.name, Rank: r, Tensor: tensors[r]})
			return err
		})
	}
	algbw := float64(size) * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(algbw, "algbw-GB/s")
	b.ReportMetric(algbw*2*float64(n-1)/float64(n), "busbw-GB/s")
}

// BenchmarkLoopbackTCP measures one TCP loopback stream (1 MiB writes, as
// the ring's chunks): the bandwidth one ring link can reach on this
// machine.
func BenchmarkLoopbackTCP(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 1<<20)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				done <- nil
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	const per = 64 << 20
	b.SetBytes(per)
	for b.Loop() {
		for i := 0; i < per; i += len(buf) {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	gbps := float64(per) * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(gbps, "GB/s")
	_ = c.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
