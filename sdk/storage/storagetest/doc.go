// Package storagetest is the conformance suite for goray storage plugins. A
// storage runs it from its own tests, in-process, over gRPC (OverGRPC) and
// through its plugin binary:
//
//	func TestConformance(t *testing.T) {
//		storagetest.Run(t, func(t *testing.T) storage.Storage {
//			return newConfiguredStore(t)
//		}, storagetest.Options{CheckNoLeftovers: noTempFiles})
//	}
//
// The suite covers round trips of empty, small, chunk-sized and 64 MiB
// objects and of one multi-GiB object (Options.LargeSize, default 2 GiB + 3
// bytes; generated and checked as it streams, never held in memory); ranged
// reads of a fused file (many objects concatenated, each read back by
// offset and length, empty ranges, ranges at and past the end); atomic
// visibility (nothing is readable while a write is in progress); overwrite
// (allowed, atomic; a failed overwrite keeps the old object); Delete
// (missing keys are fine); List by prefix; bad and unusual keys; 16
// concurrent writes and reads; bodies that fail, contexts cancelled or
// expiring mid-write, and bodies shorter or longer than announced, each of
// which must leave nothing readable (and, with Options.CheckNoLeftovers,
// nothing left behind); and, with Options.Break, a backend that fails, on
// which calls must return errors promptly instead of hanging.
//
// Every key the suite writes is under a fresh "storagetest-<random>/"
// prefix and deleted when its subtest ends, so the Factory may hand out one
// shared backend.
//
// For the plugin binary (built with host.RunWithPlugin or host.BuildPlugin
// and run with host.Launch), PluginClient checks the connection and the
// plugin's identity and returns a client and the process' pid, and
// KillMidWrite kills the process in the middle of a write (its body a
// StallingReader) and checks that the write fails with
// storage.ErrUnavailable; the plugin's test then checks what the crash left
// in its backend. BenchmarkWriteRead measures writes and reads of any
// storage, with RepeatReader as a cheap body.
package storagetest
