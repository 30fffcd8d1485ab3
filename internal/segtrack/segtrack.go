// Package segtrack lets the goray runtime of a process learn of the tensor
// segments sdk/transport creates and frees in that process, so that it can
// record them (see internal/recvseg) and unlink what the process never
// freed when it closes or dies. Outside a goray driver or worker (a plugin,
// a test) nothing is hooked and the calls do nothing.
package segtrack

import "sync"

var (
	mu               sync.RWMutex
	onCreate, onFree func(name string)
)

// Set installs the hooks (nil, nil removes them).
func Set(create, free func(name string)) {
	mu.Lock()
	onCreate, onFree = create, free
	mu.Unlock()
}

// Created reports a segment this process created and owns.
func Created(name string) {
	mu.RLock()
	f := onCreate
	mu.RUnlock()
	if f != nil {
		f(name)
	}
}

// Freed reports a segment this process unlinked.
func Freed(name string) {
	mu.RLock()
	f := onFree
	mu.RUnlock()
	if f != nil {
		f(name)
	}
}
