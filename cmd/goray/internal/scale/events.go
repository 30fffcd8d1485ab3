package scale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/goray-dev/goray/gcs"
	"github.com/goray-dev/goray/sdk/ray"
)

// Tasks and actors the measurements run on the real nodes. Registered at
// package level: workers are this binary re-executed.
var (
	noopTask   = ray.Task0(noop)
	probeActor = ray.Actor0(newProbe)
	probePing  = ray.Method0((*probe).ping)
)

func noop(ctx context.Context) (int, error) { return 1, nil }

// probe is an actor that does nothing.
type probe struct{}

func newProbe(ctx context.Context) (*probe, error)     { return &probe{}, nil }
func (p *probe) ping(ctx context.Context) (int, error) { return 1, nil }

// measureEvents measures, with the real nodes and the driver up: what an
// object free and a worker's death send to the simulated nodes, the
// scheduling latency of a task and of a spillback, and placement group and
// actor creation throughput. Errors are recorded in res.
func (c *cluster) measureEvents(ctx context.Context, res *Result, opts Options) {
	// A cluster the GCS cannot keep up with may lose the real nodes (the
	// GCS declares them dead): nothing waits forever.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	fail := func(what string, err error) {
		res.Errors = append(res.Errors, what+": "+err.Error())
		fmt.Fprintf(opts.Log, "  %s: %v\n", what, err)
	}
	n := int64(len(c.fleet.nodes))
	counts := &c.fleet.counters

	// An object free: a store object (above the inline limit) put by the
	// driver and released; its owner frees it on the nodes that may hold
	// a copy (only the driver's node here).
	free, err := c.broadcastAfter(ctx, func() (int64, int64) { return counts.frees.Load(), counts.freeBytes.Load() },
		func(nd *simNode) int32 { return nd.frees.Load() }, n, func() error {
			ref, err := ray.Put(ctx, make([]byte, 256<<10))
			if err != nil {
				return err
			}
			ref.Release()
			return nil
		})
	if err != nil {
		fail("object free", err)
	}
	res.Free = free
	fmt.Fprintf(opts.Log, "  object free: %d messages, %d bytes, %d nodes reached in %.0f ms\n", free.Messages, free.Bytes, free.Reached, free.Ms)

	// A worker's death: an actor on the driver's node, killed.
	h, err := probeActor.Options(ray.NodeAffinity(c.local, false)).New(ctx)
	if err == nil {
		if _, err = probePing.On(h).Remote(ctx).Get(ctx); err == nil {
			res.WorkerDeath, err = c.broadcastAfter(ctx, func() (int64, int64) { return counts.died.Load(), counts.diedBytes.Load() },
				func(nd *simNode) int32 { return nd.deaths.Load() }, n, func() error { return h.Kill(ctx) })
		}
	}
	if err != nil {
		fail("worker death", err)
	}
	wd := res.WorkerDeath
	fmt.Fprintf(opts.Log, "  worker death: %d messages, %d bytes, %d nodes reached in %.0f ms\n", wd.Messages, wd.Bytes, wd.Reached, wd.Ms)

	// Worker deaths in a burst: actors on the driver's node, killed at once.
	burst, err := c.measureDeathBurst(ctx, burstDeaths, opts.BurstQuiet)
	if err != nil {
		fail("worker deaths in a burst", err)
	}
	res.DeathBurst = burst
	fmt.Fprintf(opts.Log, "  %d worker deaths at once: %d messages (at most %d per node), %d bytes, %d ids; %d nodes got every id, in %.0f ms\n",
		burst.Deaths, burst.Messages, burst.MaxPerNode, burst.Bytes, burst.IDs, burst.Complete, burst.Ms)

	// Scheduling latency: each call a new shape (so a new lease request,
	// never a kept lease), on a resource only one real node has.
	local, other := realResource(0), realResource(1)
	if c.local != c.real[0].ID().String() {
		local, other = other, local
	}
	lat := func(res string) ([]time.Duration, error) {
		// Warm up: as many calls at once as will be timed, so that the
		// node has an idle worker for each (a lease is kept 50 ms after
		// its call, and a new worker process is not what is measured).
		var warm []ray.Ref[int]
		for i := range opts.Events + 1 {
			warm = append(warm, noopTask.Options(ray.CPUs(0), ray.Resource(res, float64(i+1))).Remote(ctx))
		}
		for _, r := range warm {
			if _, err := r.Get(ctx); err != nil {
				return nil, err
			}
		}
		var ds []time.Duration
		for i := range opts.Events + 1 {
			start := time.Now()
			if _, err := noopTask.Options(ray.CPUs(0), ray.Resource(res, float64(i+1))).Remote(ctx).Get(ctx); err != nil {
				return nil, err
			}
			ds = append(ds, time.Since(start))
		}
		return ds, nil
	}
	if ds, err := lat(local); err != nil {
		fail("task latency", err)
	} else {
		res.TaskLocalMs = latency(ds)
	}
	if ds, err := lat(other); err != nil {
		fail("spillback latency", err)
	} else {
		res.SpillbackMs = latency(ds)
	}
	fmt.Fprintf(opts.Log, "  task latency: local %.2f ms, spillback %.2f ms (medians)\n", res.TaskLocalMs.Median, res.SpillbackMs.Median)

	// Placement groups: one bundle of one CPU each, created and waited for
	// one at a time, then removed.
	var pgs []*ray.PlacementGroup
	pgEvents := opts.Events
	if n >= 1000 {
		pgEvents = 2 // a removal tells every node, one after another
	}
	p0, c0, x0 := counts.prepares.Load(), counts.commits.Load(), counts.cancels.Load()
	start := time.Now()
	for range pgEvents {
		pg, err := ray.CreatePlacementGroup(ctx, []ray.Bundle{{"CPU": 1}}, ray.Pack)
		if err == nil {
			err = pg.Wait(ctx)
		}
		if err != nil {
			fail("placement group", err)
			break
		}
		pgs = append(pgs, pg)
	}
	if len(pgs) > 0 {
		res.PlacementGroupsPerSec = float64(len(pgs)) / time.Since(start).Seconds()
	}
	start = time.Now()
	for _, pg := range pgs {
		if err := ray.RemovePlacementGroup(ctx, pg); err != nil {
			fail("removing a placement group", err)
			break
		}
	}
	if len(pgs) > 0 {
		res.PGRemovalsPerSec = float64(len(pgs)) / time.Since(start).Seconds()
		k := float64(len(pgs))
		res.PGMessages = (float64(counts.prepares.Load()-p0) + float64(counts.commits.Load()-c0)) / k
		res.PGRemovalMessages = float64(counts.cancels.Load()-x0) / k
	}

	// Actors: created at once, each a worker process on a real node.
	start = time.Now()
	var hs []ray.ActorHandle[probe]
	for range opts.Events {
		hs = append(hs, probeActor.Remote(ctx))
	}
	okActors := 0
	for _, h := range hs {
		if err := h.Ready(ctx); err != nil {
			fail("actor creation", err)
			break
		}
		okActors++
	}
	if okActors > 0 {
		res.ActorsPerSec = float64(okActors) / time.Since(start).Seconds()
	}
	for _, h := range hs {
		_ = h.Kill(ctx)
	}
	fmt.Fprintf(opts.Log, "  placement groups %.1f/s (%.0f messages to simulated nodes each), removal %.2f/s (%.0f messages each), actors %.1f/s\n",
		res.PlacementGroupsPerSec, res.PGMessages, res.PGRemovalsPerSec, res.PGRemovalMessages, res.ActorsPerSec)
}

// measureNodeDeath silences one simulated node and measures how long the
// GCS takes to declare it dead and every other simulated node to see it
// so in its view.
func (c *cluster) measureNodeDeath(ctx context.Context, res *Result, opts Options) {
	f := c.fleet
	if len(f.nodes) < 2 {
		return
	}
	events, unsubscribe := c.gcs.srv.Subscribe()
	defer unsubscribe()
	victim := f.nodes[len(f.nodes)-1]
	w := newDeathWatch(victim.id, len(f.nodes), f.alive()-1)
	w.seen[victim.idx].Store(true)
	f.watch.Store(w)
	defer f.watch.Store(nil)
	// Its last report ends before it is marked killed.
	pollUntil(ctx, time.Minute, func() bool { return !victim.busy.Load() })
	f.kill(victim.idx)
	pollUntil(ctx, time.Minute, func() bool { return !victim.busy.Load() })
	silent := time.Unix(0, victim.lastHB.Load())
	limit := time.Duration(opts.FailureThreshold+3) * opts.HealthPeriod
	var declared time.Time
	timeout := time.After(limit + 30*time.Second)
wait:
	for {
		select {
		case ev := <-events:
			if ev.Kind == gcs.EventNodeDead && string(ev.Node.GetNodeId()) == string(victim.id.Bytes()) {
				declared = time.Now()
				break wait
			}
		case <-timeout:
			res.Errors = append(res.Errors, "node death: the GCS did not declare the silent node dead")
			return
		case <-ctx.Done():
			return
		}
	}
	res.NodeDeath.DetectMs = ms(declared.Sub(silent))
	select {
	case <-w.all:
	case <-time.After(time.Duration(max(10, len(f.nodes)/100)) * opts.ReportPeriod * 4):
	case <-ctx.Done():
	}
	res.NodeDeath.Informed = w.watchers - int(w.left.Load())
	if last := w.last.Load(); last > 0 {
		res.NodeDeath.InformedMs = ms(time.Unix(0, last).Sub(declared))
	}
	fmt.Fprintf(opts.Log, "  node death: declared after %.0f ms; %d nodes informed within %.0f ms\n", res.NodeDeath.DetectMs, res.NodeDeath.Informed, res.NodeDeath.InformedMs)
}

// burstDeaths is how many actors the burst event kills at once.
const burstDeaths = 16

// DeathBurst is what k worker deaths at once on the driver's node sent to
// the simulated nodes: WorkersDied messages and the worker ids they
// carried, in total and per node (per node only with per-node
// connections).
type DeathBurst struct {
	Deaths   int   `json:"deaths"`   // actors killed at once
	Messages int64 `json:"messages"` // WorkersDied calls, every simulated node
	Bytes    int64 `json:"bytes"`
	IDs      int64 `json:"ids"` // worker ids those calls carried
	// MaxPerNode is the most WorkersDied calls one node got; Complete
	// the nodes that got every dead worker's id.
	MaxPerNode int32   `json:"max_per_node"`
	Complete   int     `json:"complete"`
	Ms         float64 `json:"ms"` // from the kills to the last message
}

// measureDeathBurst starts k actors on the driver's node, kills them at
// once and counts what the simulated nodes receive until each got k ids
// or nothing more arrived for quiet (at most a minute in all).
func (c *cluster) measureDeathBurst(ctx context.Context, k int, quiet time.Duration) (DeathBurst, error) {
	b := DeathBurst{Deaths: k}
	hs := make([]ray.ActorHandle[probe], k)
	for i := range hs {
		hs[i] = probeActor.Options(ray.NodeAffinity(c.local, false)).Remote(ctx)
	}
	kill := func() error {
		errs := make([]error, len(hs))
		var wg sync.WaitGroup
		for i, h := range hs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = h.Kill(ctx)
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	for _, h := range hs {
		if _, err := probePing.On(h).Remote(ctx).Get(ctx); err != nil {
			_ = kill()
			return b, err
		}
	}
	nodes := c.fleet.nodes
	calls0, ids0 := make([]int32, len(nodes)), make([]int32, len(nodes))
	for i, nd := range nodes {
		calls0[i], ids0[i] = nd.deaths.Load(), nd.deathIDs.Load()
	}
	counts := &c.fleet.counters
	m0, by0 := counts.died.Load(), counts.diedBytes.Load()
	idsNow := func() int64 {
		var n int64
		for i, nd := range nodes {
			n += int64(nd.deathIDs.Load() - ids0[i])
		}
		return n
	}
	start := time.Now()
	if err := kill(); err != nil {
		return b, err
	}
	want := int64(len(nodes)) * int64(k)
	last, lastChange := int64(0), time.Now()
	pollUntil(ctx, time.Minute, func() bool {
		if n := idsNow(); n != last {
			last, lastChange = n, time.Now()
		}
		return last >= want || time.Since(lastChange) > quiet
	})
	b.Messages, b.Bytes = counts.died.Load()-m0, counts.diedBytes.Load()-by0
	b.IDs = idsNow()
	b.Ms = ms(lastChange.Sub(start))
	for i, nd := range nodes {
		b.MaxPerNode = max(b.MaxPerNode, nd.deaths.Load()-calls0[i])
		if nd.deathIDs.Load()-ids0[i] >= int32(k) {
			b.Complete++
		}
	}
	return b, nil
}
