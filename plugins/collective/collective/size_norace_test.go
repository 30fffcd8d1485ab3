//go:build !race

package collective_test

// largeCount is the "more than a chunk per step" size of the tables:
// 1 Mi + 3 elements.
const largeCount = 1<<20 + 3
