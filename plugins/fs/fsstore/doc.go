// Package fsstore is goray's local-disk storage, the default place the
// object store spills objects to. It implements storage.Storage; the
// goray-storage-fs plugin binary (plugins/fs) serves it.
//
// Objects are files under the configured directory, at their key's path
// (key "s1/node-a/000017.spill" is <directory>/s1/node-a/000017.spill).
// A write goes to a temporary file (TempPrefix + random) in the object's
// directory, is flushed with fsync (config `fsync`, default true) and is
// renamed into place only once every byte arrived, so an object is either
// there whole or not at all. The writer holds an flock on its temporary
// file; a crash (even kill -9) leaves the file unlocked, and the next
// Configure removes such stale files, but never one a live writer of
// another process holds.
//
// The directory is created by Configure (at every plugin start) and never
// recreated while the plugin runs: if it vanishes (removed, unmounted),
// calls fail with storage.ErrUnavailable instead of writing to a fresh
// empty directory, and Health stays fine so that the host does not restart
// the plugin into one.
//
// Limits: a key cannot name a directory of other keys ("a" and "a/b" cannot
// both exist; the second write fails with storage.ErrBadKey), and path
// elements starting with TempPrefix are reserved.
package fsstore
