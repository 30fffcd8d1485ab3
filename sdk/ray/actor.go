package ray

import (
	"context"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/sdk/ray/internal/core"
	"github.com/vmihailenco/msgpack/v5"
)

// ActorHandle is a handle to an actor of type T. It can be copied, passed
// to tasks and other actors, and stored inside values.
type ActorHandle[T any] struct{ ref core.ActorRef }

// ID returns the actor id in hex.
func (h ActorHandle[T]) ID() string { return h.ref.ID.String() }

// Name returns the actor's name ("" when unnamed).
func (h ActorHandle[T]) Name() string { return h.ref.Name }

// Ready waits until the actor's constructor has run. It returns an error
// matching ErrActorDied when the actor could not be created or died (an
// *ActorNameTakenError, also matching ErrActorNameTaken, at once when its
// name was taken). While the actor restarts (MaxRestarts) it waits for the
// new instance, however long the cluster takes to notice the failure.
func (h ActorHandle[T]) Ready(ctx context.Context) error {
	cw, err := current()
	if err != nil {
		return err
	}
	return cw.ActorReady(ctx, h.ref)
}

// Kill ends the actor's process at once, and the actor for good: it does
// not restart, whatever MaxRestarts says, and its name is free at once.
// Calls in flight and later calls fail with an error matching
// ErrActorDied. With AllowRestart only the process ends, and the actor
// restarts as after a crash when it has restarts left.
func (h ActorHandle[T]) Kill(ctx context.Context, opts ...KillOption) error {
	return Kill(ctx, h, opts...)
}

// KillOption configures Kill.
type KillOption func(*killOptions)

type killOptions struct{ restart bool }

// AllowRestart makes Kill end the actor's process as a crash would (Ray's
// ray.kill(actor, no_restart=False)): an actor with restarts left
// (MaxRestarts) restarts, and the kill counts as one of them; one without
// dies, its error saying its restarts ran out. Calls in flight are retried
// on the new instance when their MaxTaskRetries allow, else fail with
// ActorUnavailableError. An actor with no live instance (pending, or
// already restarting) is left as it is.
func AllowRestart() KillOption { return func(o *killOptions) { o.restart = true } }

// EncodeMsgpack implements msgpack.CustomEncoder. It notes the actor, so
// a call passing the handle waits until its creator has registered it.
func (h ActorHandle[T]) EncodeMsgpack(enc *msgpack.Encoder) error {
	codec.NoteActor(enc, h.ref.ID)
	return enc.Encode(h.ref)
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (h *ActorHandle[T]) DecodeMsgpack(dec *msgpack.Decoder) error { return dec.Decode(&h.ref) }

// Kill ends an actor's process; see ActorHandle.Kill.
func Kill[T any](ctx context.Context, h ActorHandle[T], opts ...KillOption) error {
	var o killOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	cw, err := current()
	if err != nil {
		return err
	}
	return cw.KillActor(ctx, h.ref, o.restart)
}

// GetActor returns a handle to the live actor with the given name in this
// job's namespace, or in the one InNamespace names. It fails with an error
// matching ErrActorNotFound when there is none: a killed or dead actor's
// name is free at once. T must be the actor's type; a mismatch surfaces as
// an error on the first call.
func GetActor[T any](ctx context.Context, name string, opts ...GetActorOption) (ActorHandle[T], error) {
	cw, err := current()
	if err != nil {
		return ActorHandle[T]{}, err
	}
	o := getActorOptions{namespace: cw.Namespace()}
	for _, opt := range opts {
		opt(&o)
	}
	ref, err := cw.LookupActorIn(ctx, o.namespace, name)
	if err != nil {
		return ActorHandle[T]{}, err
	}
	return ActorHandle[T]{ref: ref}, nil
}
