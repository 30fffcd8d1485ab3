// Command concurrency-groups shows an actor's concurrency groups (Ray's
// concurrency_groups): a model server whose predictions run in a
// "compute" group of limit 2 and whose health check runs in a "health"
// group of its own, so that the health check answers while compute is
// saturated. It runs on an embedded single-node cluster with
//
//	go run ./examples/concurrency-groups
//
// or against a running cluster when GORAY_ADDRESS is set. It exits non-zero
// if any result is wrong.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// Server serves predictions of a model it loads on request.
type Server struct {
	mu       sync.Mutex
	inFlight int           // predictions running
	loaded   chan struct{} // closed once the model is loaded
}

// NewServer starts a server whose model is not loaded yet.
func NewServer(ctx context.Context) (*Server, error) {
	return &Server{loaded: make(chan struct{})}, nil
}

// Predict waits for the model, then predicts (doubles x). It runs in the
// "compute" group: at most 2 at once.
func (s *Server) Predict(ctx context.Context, x int) (int, error) {
	s.mu.Lock()
	s.inFlight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	select {
	case <-s.loaded:
		return 2 * x, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Status is what Health reports.
type Status struct {
	Loaded   bool
	InFlight int
}

// Health reports the server's state. It runs in the "health" group, so
// it answers whatever the compute group is doing.
func (s *Server) Health(ctx context.Context) (Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.loaded:
		return Status{Loaded: true, InFlight: s.inFlight}, nil
	default:
		return Status{InFlight: s.inFlight}, nil
	}
}

// Load loads the model. It runs in the default group (limit
// MaxConcurrency, 1 here), which compute does not block either.
func (s *Server) Load(ctx context.Context) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.loaded:
	default:
		close(s.loaded)
	}
	return true, nil
}

var (
	// ServerActor declares the groups and their limits.
	ServerActor = ray.Actor0(NewServer, ray.ConcurrencyGroup("compute", 2), ray.ConcurrencyGroup("health", 1))
	// Each method is assigned to a group when registered; Load is in
	// none, so it runs in the default group.
	Predict = ray.Method1((*Server).Predict, ray.InGroup("compute"))
	Health  = ray.Method0((*Server).Health, ray.InGroup("health"))
	Load    = ray.Method0((*Server).Load)
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := ray.MustInit(ctx) // in a worker process this serves calls and never returns
	err := run(ctx)
	_ = rt.Shutdown(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "concurrency-groups:", err)
		os.Exit(1)
	}
	fmt.Println("OK")
}

func run(ctx context.Context) error {
	srv, err := ServerActor.New(ctx)
	if err != nil {
		return err
	}
	defer srv.Kill(ctx)

	// Four predictions: two run (compute's limit) and wait for the model,
	// two queue behind them.
	var preds []ray.Ref[int]
	for x := 1; x <= 4; x++ {
		preds = append(preds, Predict.On(srv).Remote(ctx, ray.V(x)))
	}
	// Health answers meanwhile, in its own group: ask until both compute
	// slots are taken.
	var st Status
	for st.InFlight < 2 {
		if st, err = Health.On(srv).Remote(ctx).Get(ctx); err != nil {
			return fmt.Errorf("health while compute is saturated: %w", err)
		}
		if st.InFlight > 2 {
			return fmt.Errorf("%d predictions run at once, over compute's limit of 2", st.InFlight)
		}
	}
	fmt.Printf("health answered while compute was saturated: %d predictions running, model loaded: %v\n", st.InFlight, st.Loaded)

	// Load runs in the default group: compute does not hold it up either.
	if _, err := Load.On(srv).Remote(ctx).Get(ctx); err != nil {
		return err
	}
	got, err := ray.GetAll(ctx, preds)
	if err != nil {
		return err
	}
	fmt.Println("predictions:", got)
	if fmt.Sprint(got) != "[2 4 6 8]" {
		return fmt.Errorf("predictions %v, want [2 4 6 8]", got)
	}

	// A call may name its group (Ray's .options(concurrency_group=...));
	// one the actor does not declare is a typed error.
	_, err = Health.On(srv).Options(ray.InGroup("gpu")).Remote(ctx).Get(ctx)
	var unknown *ray.UnknownConcurrencyGroupError
	if !errors.Is(err, ray.ErrUnknownConcurrencyGroup) || !errors.As(err, &unknown) {
		return fmt.Errorf("a call in an undeclared group: %v, want an *UnknownConcurrencyGroupError", err)
	}
	fmt.Printf("a call in group %q fails: the actor declares %v\n", unknown.Group, unknown.Groups)
	return nil
}
