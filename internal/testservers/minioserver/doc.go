// Package minioserver runs a real MinIO server on loopback: Start launches
// the pinned server binary (installed by `make tools` into
// <module root>/.tools, or named by $GORAY_MINIO) on free 127.0.0.1 ports
// with a fresh data directory and random root credentials, and returns once
// the server answers and judges credentials; Close kills it and removes its
// directories. Stop and Restart (same data, address and credentials)
// simulate an S3 endpoint that goes away and comes back.
//
// Tests use it through internal/testservers/miniotest, which ties a server's life to
// the test; `goray microbenchmark` uses it directly to measure spilling to
// S3 against raw minio-go throughput to the same server.
package minioserver
