// Package providertest is the conformance suite for goray provider
// plugins. A provider runs it from its own tests, in-process, over gRPC
// (OverGRPC) and through its plugin binary (PluginClient):
//
//	func TestConformance(t *testing.T) {
//		providertest.Run(t, func(t *testing.T) provider.Provider {
//			return newConfiguredProvider(t)
//		}, providertest.Options{
//			FailingLaunch: func(r *provider.LaunchRequest) { r.NodeConfig = []byte(`{"image": "no-such-image"}`) },
//		})
//	}
//
// The suite checks, each subtest in clusters of its own:
//
//   - NodeConfigSchema: a valid schema, the same on every call;
//   - Launch: the instances show in List with their node type, request id,
//     launch time and, once running, an address; never more than asked;
//   - Idempotent: a request id sent three times (with different counts)
//     launches its instances once, and launches nothing after they were
//     terminated;
//   - Terminate: the instance leaves List (eventually), the others stay
//     running, repeated and duplicate ids are fine;
//   - TerminateUnknown: unknown ids and an empty list are no error;
//   - Clusters: List and Terminate see only the cluster they name;
//   - PollErrors (with Options.FailingLaunch): an accepted launch that
//     fails is reported once, with its request id, node type, message and
//     time, and only to its cluster;
//   - BadRequests: requests that break the rules (no request id, cluster or
//     node type, count below 1, a node_config that is not a JSON object or
//     has an unknown setting, nil requests) fail with
//     provider.ErrInvalidRequest and launch nothing;
//   - Context: every method returns promptly with context.Canceled or
//     context.DeadlineExceeded for a cancelled or expired context;
//   - Concurrent: launches sent at once, each request id twice, launch
//     one instance per id;
//   - Restart (with Options.Restart): a provider restarted on the same
//     state lists the instances launched before and launches nothing for
//     a request id it already served.
//
// Throughout, the cluster token (NodeSpec.AuthToken) must never show in an
// error or a LaunchError. Every instance a subtest launched is terminated
// when it ends, so the Factory may hand out one shared provider.
package providertest
