package ray_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/goray-dev/goray/sdk/ray"
)

// mappingOf names the mapping of this process that holds addr (the last
// field of its /proc/self/maps line; "" for anonymous memory such as the
// Go heap).
func mappingOf(addr uintptr) (string, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		l, _ := strconv.ParseUint(lo, 16, 64)
		h, _ := strconv.ParseUint(hi, 16, 64)
		if uint64(addr) >= l && uint64(addr) < h {
			if len(fields) >= 6 {
				return strings.Join(fields[5:], " "), nil
			}
			return "", nil
		}
	}
	return "", fmt.Errorf("address %#x is in no mapping", addr)
}

// bufferInfo is what a task reports about an argument it was given.
type bufferInfo struct {
	Len     int
	Sum     uint64
	Mapping string
}

func describe(b []byte) (bufferInfo, error) {
	info := bufferInfo{Len: len(b)}
	for _, c := range b {
		info.Sum += uint64(c)
	}
	if len(b) == 0 {
		return info, nil
	}
	m, err := mappingOf(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	info.Mapping = m
	return info, err
}

func describeBuffer(_ context.Context, b *ray.Buffer) (bufferInfo, error) {
	return describe(b.Bytes())
}

func describeBytes(_ context.Context, b []byte) (bufferInfo, error) { return describe(b) }

var (
	DescribeBuffer = ray.Task1(describeBuffer)
	DescribeBytes  = ray.Task1(describeBytes)
)

// TestBufferArgument: a *Buffer parameter reads a large []byte object where
// the node's store holds it (the store's shared-memory arena), where a
// []byte parameter gets a copy on the worker's heap; small and empty
// values arrive too.
func TestBufferArgument(t *testing.T) {
	ctx := testCtx(t)
	big := make([]byte, 4<<20)
	var want uint64
	for i := range big {
		big[i] = byte(i * 31)
		want += uint64(big[i])
	}
	ref, err := ray.Put(ctx, big)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Release()

	got, err := DescribeBuffer.Remote(ctx, ray.BufferRef(ref)).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Len != len(big) || got.Sum != want {
		t.Fatalf("*Buffer argument: %d bytes summing to %d, want %d summing to %d", got.Len, got.Sum, len(big), want)
	}
	if !strings.Contains(got.Mapping, "memfd:goray-store") {
		t.Fatalf("the *Buffer argument's bytes are in mapping %q, not the store's arena: a copy was made", got.Mapping)
	}
	copied, err := DescribeBytes.Remote(ctx, ref).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if copied.Sum != want || copied.Mapping == got.Mapping {
		t.Fatalf("[]byte argument: sum %d in mapping %q; want %d in the heap, not the arena %q", copied.Sum, copied.Mapping, want, got.Mapping)
	}

	for _, v := range [][]byte{[]byte("small"), {}, nil} {
		got, err := DescribeBuffer.Remote(ctx, ray.BufferValue(v)).Get(ctx)
		if err != nil {
			t.Fatalf("BufferValue(%q): %v", v, err)
		}
		var sum uint64
		for _, c := range v {
			sum += uint64(c)
		}
		if got.Len != len(v) || got.Sum != sum {
			t.Fatalf("BufferValue(%q) arrived as %d bytes summing to %d", v, got.Len, got.Sum)
		}
	}
}
