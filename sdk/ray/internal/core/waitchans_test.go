package core

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// TestWaitChans: Wait returns the first n ready in order, waits for those
// that become ready, returns what is ready when ctx ends, and ErrShutdown
// when the worker closes.
func TestWaitChans(t *testing.T) {
	cw := &CoreWorker{closed: make(chan struct{})}
	mk := func(k int) ([]chan struct{}, []<-chan struct{}) {
		cs := make([]chan struct{}, k)
		ro := make([]<-chan struct{}, k)
		for i := range cs {
			cs[i] = make(chan struct{})
			ro[i] = cs[i]
		}
		return cs, ro
	}
	// Ready before: the first n in order.
	cs, ro := mk(5)
	close(cs[4])
	close(cs[1])
	close(cs[3])
	got, err := cw.WaitChans(context.Background(), ro, 2)
	if err != nil || !slices.Equal(got, []int{1, 3}) {
		t.Errorf("three ready, n=2: %v, %v; want [1 3]", got, err)
	}
	// Ready later, one after another.
	cs, ro = mk(1000)
	go func() {
		close(cs[700])
		close(cs[10])
	}()
	got, err = cw.WaitChans(context.Background(), ro, 2)
	if err != nil || !slices.Equal(got, []int{10, 700}) {
		t.Errorf("two made ready while waiting: %v, %v; want [10 700]", got, err)
	}
	// ctx ended: what is ready so far.
	cs, ro = mk(3)
	close(cs[2])
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err = cw.WaitChans(ctx, ro, 3)
	if err != nil || !slices.Equal(got, []int{2}) {
		t.Errorf("ctx ended with one ready: %v, %v; want [2]", got, err)
	}
	// Shutdown.
	_, ro = mk(2)
	close(cw.closed)
	if _, err := cw.WaitChans(context.Background(), ro, 1); !errors.Is(err, ErrShutdown) {
		t.Errorf("after shutdown: %v; want ErrShutdown", err)
	}
}
