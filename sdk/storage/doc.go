// Package storage is the SDK for goray storage plugins: out-of-process
// backends that the object store spills objects to when memory runs short,
// and restores them from (a local disk, S3, ...).
//
// A storage plugin implements Storage and calls Serve from its main
// function:
//
//	func main() { storage.Serve(mystore.New()) }
//
// What every plugin kind shares lives in package plugin: the optional
// interfaces a plugin may implement (plugin.Configurable for a config block,
// declared as a tagged Go struct with plugin.TypedConfig;
// plugin.HealthChecker; plugin.Versioned; plugin.LoggerSetter), the serve
// path (Serve is a thin wrapper of plugin.ServeKind) and the error table
// that keeps errors' identity across the boundary:
//
//	type Config struct {
//		Directory string `hcl:"directory,required" doc:"Where objects go."`
//	}
//
//	func (s *Store) ConfigSpec() plugin.ConfigSpec { return plugin.TypedConfig(s.Configure) }
//	func (s *Store) Configure(ctx context.Context, c Config) error { ... }
//
// The runtime (the plugin host) talks to it over gRPC through NewClient.
// Object bytes never travel as one giant message: Write streams them to the
// plugin in chunks of at most ChunkSize bytes and Read streams them back.
// Restores go one better: the client's ReadInto (ReaderInto) hands the
// plugin a shared-memory handle — a path to the object store's memfd — and
// the SDK's server, answering for every plugin, maps it and copies the
// plugin's Read body straight into the store, so the bytes never cross the
// connection. It writes only into the object store's memory: a target that
// is not a memfd named ArenaName is refused (ErrPermission). Plugin
// authors implement only Read.
//
// # Keys
//
// Keys are relative slash paths chosen by the runtime, such as
// "session_2026-01-02_03-04-05_123/node-ab12/000017.spill". ValidKey states
// the rules; every implementation checks them and rejects a bad key with an
// error matching ErrBadKey that names it.
//
// # Semantics
//
//   - Write is atomic. The object becomes visible to Read, List and Delete
//     only once Write returns nil. A write that fails, is cancelled, or whose
//     Body yields fewer or more bytes than Size leaves the key as it was:
//     nothing readable for a new key.
//   - Overwriting is allowed and atomic: a successful Write replaces what
//     the key held. (The runtime retries a write whose outcome it did not
//     learn under the same key, so this must work.) A reader sees either the
//     old or the new object, never a mix.
//   - Read returns a byte range of an object: spilled objects are fused into
//     files, and each is read back by offset and length. A range that does
//     not fit inside the object fails with ErrInvalidRange; it is never
//     silently shortened.
//   - Delete of missing keys is not an error. List returns the objects whose
//     keys start with a prefix (the runtime cleans up a session's files at
//     cluster shutdown this way).
//
// Every request and response is a struct, so both can grow without breaking
// plugins; a nil request is treated as an empty one. Errors are typed:
// ErrNotFound, ErrBadKey, ErrUnavailable, ErrPermission, ErrSizeMismatch and
// ErrInvalidRange keep their identity across the plugin boundary, and
// *StorageError names the operation and the key.
//
// Package storagetest holds the conformance suite every storage plugin
// should pass from its own tests.
package storage
