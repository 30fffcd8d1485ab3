package main

// Jobs of the multi-node acceptance tests:
//
//	testjob ship                the driver deletes its own executable, then
//	                            runs a task on every other node: their
//	                            workers must run a copy shipped by sha256
//	testjob where NODE          a task pinned to NODE reports where it ran
//	testjob fetch-local NODE    objects made on NODE: Wait copies them to
//	                            this node unless FetchLocal(false)
//	testjob pending DIR         a task needing resource "special", which no
//	                            node has yet; DIR/submitted once submitted
//	testjob nodekill DIR VICTIM tasks, an actor and an object on VICTIM; the
//	                            test kills VICTIM after DIR/ready appears

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/goray-dev/goray/internal/digest"
	"github.com/goray-dev/goray/sdk/ray"
)

// Where is what whereAmI reports.
type Where struct {
	Node, Exe, SHA256 string
	Attempt           int
}

// whereAmI reports the node, executable (and its sha256) and attempt of
// the task.
func whereAmI(ctx context.Context, sleep time.Duration) (Where, error) {
	time.Sleep(sleep)
	exe, err := os.Executable()
	if err != nil {
		return Where{}, err
	}
	exe, _ = filepath.EvalSymlinks(exe)
	sum, err := digest.FileSHA256(exe)
	if err != nil {
		return Where{}, err
	}
	w := Where{Node: ray.NodeID(), Exe: exe, SHA256: sum}
	if tc, ok := ray.CurrentTask(ctx); ok {
		w.Attempt = tc.Attempt
	}
	return w, nil
}

// makeBlob returns n bytes (kept in its node's object store).
func makeBlob(ctx context.Context, n int) ([]byte, error) { return make([]byte, n), nil }

var (
	// WhereAmI reports where a task ran.
	WhereAmI = ray.Task1(whereAmI)
	// MakeBlob makes an object in its node's store.
	MakeBlob = ray.Task1(makeBlob)
)

func otherNodes(ctx context.Context) ([]ray.Node, error) {
	nodes, err := ray.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []ray.Node
	for _, n := range nodes {
		if n.Alive && n.ID != ray.NodeID() {
			out = append(out, n)
		}
	}
	return out, nil
}

// runShip: workers on other nodes run the driver's binary although the
// driver's file is gone.
func runShip(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	sum, err := digest.FileSHA256(exe)
	if err != nil {
		return err
	}
	if err := os.Remove(exe); err != nil {
		return fmt.Errorf("removing the driver binary: %w", err)
	}
	fmt.Println("driver sha256:", sum)
	nodes, err := otherNodes(ctx)
	if err != nil {
		return err
	}
	if len(nodes) == 0 {
		return errors.New("no other node")
	}
	for _, n := range nodes {
		w, err := WhereAmI.Options(ray.NodeAffinity(n.ID, false)).Remote(ctx, ray.V(time.Duration(0))).Get(ctx)
		if err != nil {
			return fmt.Errorf("task on node %s: %w", n.ID, err)
		}
		fmt.Printf("exe %s %s %s\n", w.Node, w.Exe, w.SHA256)
		if w.Node != n.ID || w.SHA256 != sum {
			return fmt.Errorf("task pinned to %s ran on %s with binary sha256 %s, want %s", n.ID, w.Node, w.SHA256, sum)
		}
	}
	return nil
}

// runWhere runs a task pinned to node.
func runWhere(ctx context.Context, node string) error {
	w, err := WhereAmI.Options(ray.NodeAffinity(node, false)).Remote(ctx, ray.V(time.Duration(0))).Get(ctx)
	if err != nil {
		return err
	}
	fmt.Println("ran on:", w.Node)
	if w.Node != node {
		return fmt.Errorf("ran on %s, want %s", w.Node, node)
	}
	return nil
}

// runFetchLocal makes objects on node and checks, by the count of objects
// in this node's store, that Wait copies them here by default (Ray's
// fetch_local=True), also when a loop polls with timeout 0, and not with
// FetchLocal(false).
func runFetchLocal(ctx context.Context, node string) error {
	here := func() (int64, error) {
		u, err := ray.ObjectStoreUsage(ctx)
		return u.Objects, err
	}
	before, err := here()
	if err != nil {
		return err
	}
	blob := func() ray.Ref[[]byte] {
		return MakeBlob.Options(ray.NodeAffinity(node, false)).Remote(ctx, ray.V(4<<20))
	}
	a := blob()
	if ready, _, err := ray.Wait(ctx, []ray.Ref[[]byte]{a}, 1, ray.NoTimeout, ray.FetchLocal(false)); err != nil || len(ready) != 1 {
		return fmt.Errorf("Wait(FetchLocal(false)): %d ready, %v", len(ready), err)
	}
	n, err := here()
	fmt.Println("copies here after Wait(FetchLocal(false)):", n-before, err)
	if ready, _, err := ray.Wait(ctx, []ray.Ref[[]byte]{a}, 1, ray.NoTimeout); err != nil || len(ready) != 1 {
		return fmt.Errorf("Wait: %d ready, %v", len(ready), err)
	}
	n, err = here()
	fmt.Println("copies here after Wait:", n-before, err)
	b := blob()
	for {
		ready, _, err := ray.Wait(ctx, []ray.Ref[[]byte]{b}, 1, 0)
		if err != nil {
			return err
		}
		if len(ready) == 1 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("polling Wait with timeout 0: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	n, err = here()
	fmt.Println("copies here after polling Wait with timeout 0:", n-before, err)
	// a's copy counts only while a is referenced: the collector would free
	// it (and its copy here) after its last use.
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	return nil
}

// runPending submits a task no node can run yet and waits for it.
func runPending(ctx context.Context, dir string) error {
	ref := WhereAmI.Options(ray.Resource("special", 1), ray.CPUs(0)).Remote(ctx, ray.V(time.Duration(0)))
	if err := writeFile(filepath.Join(dir, "submitted"), "1"); err != nil {
		return err
	}
	w, err := ref.Get(ctx)
	if err != nil {
		return err
	}
	fmt.Println("special ran on:", w.Node)
	return nil
}

// runNodeKill puts tasks, an actor and an object on victim, waits for the
// test to kill it, and checks: the tasks rerun elsewhere, the actor's
// callers get ActorDiedError, the object is lost, and a hard affinity to
// the dead node is unschedulable.
func runNodeKill(ctx context.Context, dir, victim string) error {
	actor := HolderActor.Options(ray.NodeAffinity(victim, false)).Remote(ctx, ray.V("held"))
	if _, err := HolderGet.On(actor).Remote(ctx).Get(ctx); err != nil {
		return fmt.Errorf("actor on the victim: %w", err)
	}
	// Soft affinity: it may restart elsewhere.
	phoenix := HolderActor.Options(ray.NodeAffinity(victim, true), ray.MaxRestarts(1)).Remote(ctx, ray.V("phoenix"))
	if _, err := HolderGet.On(phoenix).Remote(ctx).Get(ctx); err != nil {
		return fmt.Errorf("restartable actor on the victim: %w", err)
	}
	blob := MakeBlob.Options(ray.NodeAffinity(victim, false)).Remote(ctx, ray.V(1<<20))
	// Made on the victim, not copied here: its only copy dies with it.
	if _, _, err := ray.Wait(ctx, []ray.Ref[[]byte]{blob}, 1, 20*time.Second, ray.FetchLocal(false)); err != nil {
		return err
	}
	var tasks []ray.Ref[Where]
	for range 4 {
		tasks = append(tasks, WhereAmI.Options(ray.NodeAffinity(victim, true)).Remote(ctx, ray.V(4*time.Second)))
	}
	time.Sleep(time.Second) // let them start (the test kills the node after "ready")
	if err := writeFile(filepath.Join(dir, "ready"), "1"); err != nil {
		return err
	}
	ws, err := ray.GetAll(ctx, tasks)
	if err != nil {
		return fmt.Errorf("tasks: %w", err)
	}
	retried := 0
	for _, w := range ws {
		fmt.Printf("task ran on %s attempt %d\n", w.Node, w.Attempt)
		if w.Node == victim {
			return fmt.Errorf("a task finished on the killed node %s", victim)
		}
		if w.Attempt > 0 {
			retried++
		}
	}
	fmt.Println("tasks retried:", retried)
	_, err = HolderGet.On(actor).Remote(ctx).Get(ctx)
	fmt.Println("actor error:", err)
	if !errors.Is(err, ray.ErrActorDied) {
		return fmt.Errorf("actor call after the kill: want ErrActorDied, got %v", err)
	}
	_, err = blob.Get(ctx)
	fmt.Println("object error:", err)
	if !errors.Is(err, ray.ErrObjectLost) {
		return fmt.Errorf("object on the killed node: want ErrObjectLost, got %v", err)
	}
	// Once the cluster knows the node is dead, a hard affinity to it fails.
	for {
		nodes, err := ray.Nodes(ctx)
		if err != nil {
			return err
		}
		dead := false
		for _, n := range nodes {
			dead = dead || n.ID == victim && !n.Alive
		}
		if dead {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the victim never showed as dead: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	// The restartable actor comes back on another node (its state anew).
	for {
		v, err := HolderGet.On(phoenix).Remote(ctx).Get(ctx)
		if errors.Is(err, ray.ErrActorUnavailable) {
			continue
		}
		if err != nil || v != "phoenix" {
			return fmt.Errorf("restartable actor after its node died: %q, %v", v, err)
		}
		break
	}
	fmt.Println("restartable actor restarted elsewhere: ok")
	_, err = WhereAmI.Options(ray.NodeAffinity(victim, false)).Remote(ctx, ray.V(time.Duration(0))).Get(ctx)
	fmt.Println("affinity error:", err)
	var ue *ray.UnschedulableError
	if !errors.As(err, &ue) || !errors.Is(err, ray.ErrUnschedulable) {
		return fmt.Errorf("hard affinity to the dead node: want UnschedulableError, got %v", err)
	}
	return nil
}
