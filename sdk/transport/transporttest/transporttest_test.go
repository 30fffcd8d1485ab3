package transporttest_test

import (
	"testing"

	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/internal/loopback"
	"github.com/goray-dev/goray/sdk/transport/transporttest"
)

// The loopback transport is two-sided, so these runs cover the suite's
// two-sided branch (the shm plugin covers the one-sided one).
func TestLoopback(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) (src, dst transport.Transport) {
		return loopback.Pair()
	}, transporttest.Options{LargeSize: 16 << 20})
}

func TestLoopbackOverGRPC(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) (src, dst transport.Transport) {
		src, dst = loopback.Pair()
		return transporttest.OverGRPC(t, src), transporttest.OverGRPC(t, dst)
	}, transporttest.Options{LargeSize: 16 << 20})
}
