// Package gcstest serves a real GCS on loopback for tests: Start listens on
// a free 127.0.0.1 port, serves a fresh gcs.Server there (default options,
// no cluster token) and returns its address; t.Cleanup stops it.
package gcstest
