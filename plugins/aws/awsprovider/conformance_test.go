package awsprovider_test

import (
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/testservers/mototest"
	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/providertest"
)

// conformanceOptions are the suite's options against moto: a node_config
// moto launches, a failing launch whose instance EC2 (the proxy) ends at
// once, and a restart that is a new Provider on the same EC2.
func conformanceOptions(t *testing.T, restart func(t *testing.T) provider.Provider) providertest.Options {
	return providertest.Options{
		NodeConfig:    nodeConfig(t, nil),
		Node:          provider.NodeSpec{HeadAddress: "10.0.0.1:6380", Resources: map[string]float64{provider.ResourceCPU: 1}},
		FailingLaunch: failingLaunch(t),
		Restart:       func(t *testing.T, _ provider.Provider) provider.Provider { return restart(t) },
		SettleTimeout: 30 * time.Second,
	}
}

// TestConformance runs the conformance suite in-process against moto.
func TestConformance(t *testing.T) {
	moto := mototest.Start(t)
	proxy := mototest.NewProxy(t, moto.Endpoint)
	proxy.TerminateMarked(t, moto, failMarker)
	p := open(t, proxy.URL)
	providertest.Run(t, func(*testing.T) provider.Provider { return p }, conformanceOptions(t, func(t *testing.T) provider.Provider {
		return open(t, proxy.URL)
	}))
}

// TestConformanceOverGRPC runs the suite through the SDK's gRPC bridge.
func TestConformanceOverGRPC(t *testing.T) {
	moto := mototest.Start(t)
	proxy := mototest.NewProxy(t, moto.Endpoint)
	proxy.TerminateMarked(t, moto, failMarker)
	c := providertest.OverGRPC(t, open(t, proxy.URL))
	providertest.Run(t, func(*testing.T) provider.Provider { return c }, conformanceOptions(t, func(t *testing.T) provider.Provider {
		return providertest.OverGRPC(t, open(t, proxy.URL))
	}))
}
