package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestStopResultNamesPools(t *testing.T) {
	var b bytes.Buffer
	writeStopResult(&b, "/tmp/goray", stopResult{Pools: []string{"/dev/shm/goray-pool-12-ab"}})
	if !strings.Contains(b.String(), "Removed 1 tensor segment pool of dead nodes: /dev/shm/goray-pool-12-ab") {
		t.Fatalf("stop output:\n%s", b.String())
	}
}
