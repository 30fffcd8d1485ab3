// Package miniotest runs a real MinIO server for tests: Start launches the
// pinned server binary (installed by `make tools` into <module root>/.tools,
// or named by $GORAY_MINIO) on free 127.0.0.1 ports with a fresh data
// directory and random root credentials, waits until it answers, and
// cleans up (kills the process, removes its directories) when the test
// ends. Stop and Restart (same data, address and credentials) simulate an
// S3 endpoint that goes away in the middle of a job and comes back.
//
// A missing binary is a test failure that says to run `make tools`; tests
// never skip for it.
package miniotest
