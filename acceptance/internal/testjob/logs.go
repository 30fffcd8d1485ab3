package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/goray-dev/goray/sdk/ray"
)

// printOut prints "task-out MARKER" on stdout and "task-err MARKER" on
// stderr and returns its worker's pid.
func printOut(ctx context.Context, marker string) (int, error) {
	fmt.Println("task-out " + marker)
	fmt.Fprintln(os.Stderr, "task-err "+marker)
	return os.Getpid(), nil
}

// Printer is an actor that prints.
type Printer struct{}

// NewPrinter is Printer's constructor.
func NewPrinter(ctx context.Context) (*Printer, error) { return &Printer{}, nil }

// Say prints "actor-out S" and returns the actor's pid.
func (p *Printer) Say(ctx context.Context, s string) (int, error) {
	fmt.Println("actor-out " + s)
	return os.Getpid(), nil
}

var (
	// PrintOut is the printing task.
	PrintOut = ray.Task1(printOut)
	// PrinterActor is the printing actor class.
	PrinterActor = ray.Actor0(NewPrinter)
	// PrinterSay prints.
	PrinterSay = ray.Method1((*Printer).Say)
)

// runLogs runs a task and a named actor on node (anywhere with "-") that
// print marker, writes "TASKPID ACTORPID" to dir/ready, waits for dir/go
// and has the actor print "late-MARKER" (logs_test.go).
func runLogs(ctx context.Context, node, dir, marker string) error {
	var opts []ray.Option
	if node != "-" {
		opts = append(opts, ray.NodeAffinity(node, false))
	}
	taskPid, err := PrintOut.Options(opts...).Remote(ctx, ray.V(marker)).Get(ctx)
	if err != nil {
		return fmt.Errorf("task: %w", err)
	}
	actor := PrinterActor.Options(append(opts, ray.Name("printer"))...).Remote(ctx)
	actorPid, err := PrinterSay.On(actor).Remote(ctx, ray.V(marker)).Get(ctx)
	if err != nil {
		return fmt.Errorf("actor: %w", err)
	}
	fmt.Printf("task pid: %d\nactor pid: %d\n", taskPid, actorPid)
	if err := writeFile(filepath.Join(dir, "ready"), fmt.Sprintf("%d %d", taskPid, actorPid)); err != nil {
		return err
	}
	if err := pollFile(ctx, filepath.Join(dir, "go")); err != nil {
		return err
	}
	if _, err := PrinterSay.On(actor).Remote(ctx, ray.V("late-"+marker)).Get(ctx); err != nil {
		return fmt.Errorf("actor, late: %w", err)
	}
	return nil
}
