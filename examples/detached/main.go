// Command detached keeps a shop's inventory in a detached actor: an actor
// that outlives the job that created it, found by name from later jobs in
// its namespace, until it is killed (Ray's lifetime="detached" and
// namespaces).
//
// Each run is a new job (a new driver process) doing one thing:
//
//   - create: creates the actor "inventory", detached, in the job's
//     namespace, and exits; GetIfExists makes a second create return the
//     actor already there instead of failing;
//   - add ITEM: finds "inventory" in the job's namespace and adds an item
//     to it (its state is kept across jobs);
//   - find: says whether "inventory" is in the job's namespace, or with
//     --in in the namespace named;
//   - kill: kills it, which frees its name.
//
// --namespace puts the job in a namespace; without it the job gets a
// namespace of its own, where no other job's actor is. Start a node and
// run it, from the repository root:
//
//	goray start --head --port 6379
//	GORAY_ADDRESS=127.0.0.1:6379 go run ./examples/detached --namespace shop create
//	GORAY_ADDRESS=127.0.0.1:6379 go run ./examples/detached --namespace shop add apples
//	GORAY_ADDRESS=127.0.0.1:6379 go run ./examples/detached --namespace shop add pears
//	GORAY_ADDRESS=127.0.0.1:6379 go run ./examples/detached --namespace other find
//	GORAY_ADDRESS=127.0.0.1:6379 go run ./examples/detached find --in shop
//	goray list actors
//	GORAY_ADDRESS=127.0.0.1:6379 go run ./examples/detached --namespace shop kill
//	GORAY_ADDRESS=127.0.0.1:6379 go run ./examples/detached --namespace shop find
//	goray stop
//
// A detached actor needs a cluster that outlives the driver: without
// GORAY_ADDRESS the driver would start an embedded node that stops with
// it, and the actor with the node.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// Inventory counts items.
type Inventory struct{ items map[string]int }

// NewInventory creates an empty inventory.
func NewInventory(ctx context.Context) (*Inventory, error) {
	return &Inventory{items: map[string]int{}}, nil
}

// Add adds one item and returns how many items the inventory holds.
func (inv *Inventory) Add(ctx context.Context, item string) (int, error) {
	inv.items[item]++
	return inv.Count(ctx)
}

// Count returns how many items the inventory holds.
func (inv *Inventory) Count(ctx context.Context) (int, error) {
	n := 0
	for _, c := range inv.items {
		n += c
	}
	return n, nil
}

// Pid returns the process id of the actor's worker.
func (inv *Inventory) Pid(ctx context.Context) (int, error) { return os.Getpid(), nil }

var (
	InventoryActor = ray.Actor0(NewInventory)
	Add            = ray.Method1((*Inventory).Add)
	Count          = ray.Method0((*Inventory).Count)
	Pid            = ray.Method0((*Inventory).Pid)
)

// name is the actor's name in its namespace.
const name = "inventory"

func main() {
	if ray.IsWorker() {
		ray.Init(context.Background()) // serves tasks; never returns
	}
	namespace := flag.String("namespace", "", "the job's namespace (default: $GORAY_NAMESPACE, else one of the job's own)")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *namespace, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "detached:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, namespace string, args []string) error {
	if len(args) == 0 || !slices.Contains([]string{"create", "add", "find", "kill"}, args[0]) {
		return errors.New("usage: detached [--namespace NS] create | add ITEM | find [--in NS] | kill")
	}
	var opts []ray.InitOption
	if namespace != "" {
		opts = append(opts, ray.Namespace(namespace))
	}
	rt, err := ray.Init(ctx, opts...)
	if err != nil {
		return err
	}
	defer rt.Shutdown(context.Background())
	mode, args := args[0], args[1:]
	switch mode {
	case "create":
		// Detached: it outlives this job. GetIfExists: a second create
		// gets the actor already there. Wait for Ready before exiting:
		// the creating process runs the creation.
		inv, err := InventoryActor.Options(ray.Name(name), ray.Lifetime(ray.DetachedLifetime), ray.GetIfExists()).New(ctx)
		if err == nil {
			err = inv.Ready(ctx)
		}
		if err != nil {
			return err
		}
		n, err := Count.On(inv).Remote(ctx).Get(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("actor %q is ready in namespace %q, holding %d items; it outlives this job\n", name, rt.Namespace(), n)
	case "add":
		if len(args) != 1 {
			return errors.New("usage: detached add ITEM")
		}
		inv, err := ray.GetActor[Inventory](ctx, name)
		if err != nil {
			return err
		}
		n, err := Add.On(inv).Remote(ctx, ray.V(args[0])).Get(ctx)
		if err != nil {
			return err
		}
		pid, err := Pid.On(inv).Remote(ctx).Get(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("added %s: the inventory holds %d items (actor pid %d)\n", args[0], n, pid)
	case "find":
		fs := flag.NewFlagSet("find", flag.ContinueOnError)
		in := fs.String("in", "", "look in this namespace instead of the job's")
		if err := fs.Parse(args); err != nil {
			return err
		}
		var gopts []ray.GetActorOption
		where := rt.Namespace()
		if *in != "" {
			gopts, where = append(gopts, ray.InNamespace(*in)), *in
		}
		inv, err := ray.GetActor[Inventory](ctx, name, gopts...)
		if errors.Is(err, ray.ErrActorNotFound) {
			fmt.Printf("no actor %q in namespace %q\n", name, where)
			return nil
		}
		if err != nil {
			return err
		}
		n, err := Count.On(inv).Remote(ctx).Get(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("found actor %q in namespace %q, holding %d items\n", name, where, n)
	case "kill":
		inv, err := ray.GetActor[Inventory](ctx, name)
		if err != nil {
			return err
		}
		if err := inv.Kill(ctx); err != nil {
			return err
		}
		fmt.Printf("killed actor %q of namespace %q\n", name, rt.Namespace())
	}
	return nil
}
