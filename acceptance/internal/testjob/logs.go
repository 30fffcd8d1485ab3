package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
	// The actor first: a worker that hosts an actor never runs a task, so
	// the task gets a worker of its own. (Task first, its worker, idle once
	// the driver returned its lease, could be handed to the actor, as Ray
	// also reuses idle workers for actors; on a loaded machine it was, and
	// both lines were in one worker's log.)
	actor := PrinterActor.Options(append(opts, ray.Name("printer"))...).Remote(ctx)
	actorPid, err := PrinterSay.On(actor).Remote(ctx, ray.V(marker)).Get(ctx)
	if err != nil {
		return fmt.Errorf("actor: %w", err)
	}
	taskPid, err := PrintOut.Options(opts...).Remote(ctx, ray.V(marker)).Get(ctx)
	if err != nil {
		return fmt.Errorf("task: %w", err)
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

// floodOut writes its worker's id to dir/worker, prints "flood-start",
// waits for dir/go, then prints lines "flood NNNNNNNN" (padded to 100 bytes) on stdout until it
// printed mib MiB, and returns its worker's id and how many lines it
// printed (logbounds_test.go).
func floodOut(ctx context.Context, mib int, dir string) (string, error) {
	id := os.Getenv("GORAY_WORKER_ID")
	if err := writeFile(filepath.Join(dir, "worker"), id); err != nil {
		return "", err
	}
	fmt.Println("flood-start")
	if err := pollFile(ctx, filepath.Join(dir, "go")); err != nil {
		return "", err
	}
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	n := 0
	for size := 0; size < mib<<20; n++ {
		line := fmt.Sprintf("flood %08d %s\n", n, strings.Repeat("x", 84))
		size += len(line)
		if _, err := w.WriteString(line); err != nil {
			return "", err
		}
	}
	if err := w.Flush(); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %d", id, n), nil
}

// FloodOut is the flooding task.
var FloodOut = ray.Task2(floodOut)

// runLogFlood runs FloodOut for mib MiB (it waits for dir/go) and writes
// "WORKERID LINES" to dir/ready.
func runLogFlood(ctx context.Context, mib, dir string) error {
	n, err := strconv.Atoi(mib)
	if err != nil {
		return err
	}
	res, err := FloodOut.Remote(ctx, ray.V(n), ray.V(dir)).Get(ctx)
	if err != nil {
		return fmt.Errorf("flood: %w", err)
	}
	return writeFile(filepath.Join(dir, "ready"), res)
}
