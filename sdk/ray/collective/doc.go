// Package collective is goray's collective communication library for
// actors, in the model of Ray's ray.util.collective: a group is a list of
// actors (their ranks, in order) and a backend, a transport plugin that
// implements transport.Collective (goray's "collective" plugin); the
// group's members then all-reduce, broadcast, all-gather, reduce-scatter
// and synchronise shared-memory tensors from inside their methods.
//
// # Declaring a group
//
// The driver (or any task or actor) declares the group once:
//
//	workers := []ray.ActorHandle[Worker]{w0, w1, w2, w3} // actors declared with ray.Transports("collective")
//	g, err := collective.CreateGroup(ctx, "grads", "collective", collective.Members(workers...))
//
// The declaration (members in rank order, backend, options) lives in the
// cluster's key-value store (the GCS), scoped to the job. It is cheap: no
// actor is contacted.
//
// # Collective calls
//
// Inside a member's method, pass the method's ctx:
//
//	func (w *Worker) Step(ctx context.Context, n int) (float32, error) {
//		grad, _ := transport.NewTensor(transport.Float32, int64(n)) // a shared-memory tensor
//		defer grad.Free()
//		// ... fill grad ...
//		if err := collective.AllReduce(ctx, "grads", grad, collective.Sum); err != nil {
//			return 0, err
//		}
//		// grad now holds the sum over every rank
//	}
//
// The first call of a member joins it to the group: it finds its rank from
// its actor id, and its node's plugin meets the other ranks' plugins (a
// rendezvous through the cluster KV) and connects them in a ring. Every
// member must make the same calls in the same order with matching
// arguments, as with NCCL or Gloo; the first call therefore blocks until
// every member has made it. Tensor bytes never cross a gRPC message: the
// plugin of each member's node maps the member's shared-memory segments
// and exchanges the bytes over its own TCP connections.
//
// # Failures
//
// A call that fails on one member (its process dies during the call, its
// deadline passes, its arguments differ from the others') breaks the group,
// as an aborted NCCL communicator: the other members' pending and later
// calls fail promptly with an error matching ErrRankFailed (errors.As gives
// a *transport.CollectiveError naming the failed rank), and a member that
// dies outside a call makes the others' next call fail with ErrTimeout
// within the group's timeout (the Timeout option, else the plugin's
// configured timeout). A broken group stays broken for its members until it
// is destroyed (DestroyGroup, from the driver or in every member) and
// created again, for example with a replacement actor; members pick up the
// new declaration at their next call.
//
// # Point-to-point transfers
//
// The backend is also a two-sided tensor transport: a method registered
// with .TensorTransport("collective") returns tensors that the reading
// actor receives over the plugins' connections (Send on the source's node,
// Receive on the reader's); when both actors are members of a common group
// the transfer is bound to their ranks and fails with ErrRankFailed when
// the group breaks.
package collective
