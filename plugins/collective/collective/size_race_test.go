//go:build race

package collective_test

// largeCount is the "more than a chunk per step" size of the tables: smaller
// under the race detector, which slows every element access.
const largeCount = 1<<16 + 3
