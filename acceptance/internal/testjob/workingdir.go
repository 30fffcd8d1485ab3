package main

// testjob files NAME...   runs a task on every alive node that reports its
//                         worker's directory, as "cwd <node> DIR", and the
//                         files NAME... read from it, as
//                         "file <node> NAME content" or "file <node> NAME missing";
//                         the driver's own as "driver-cwd DIR", "driver-file NAME ..."
//
// $TESTJOB_WORKING_DIR (DIR[,EXCLUDE...]) is passed to ray.WorkingDir.

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/goray-dev/goray/sdk/ray"
)

// filesHere returns the worker's directory and, for each name, the file's
// content read relative to it, or "missing".
func filesHere(ctx context.Context, names []string) ([]string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	out := []string{"cwd " + wd}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			out = append(out, "file "+n+" missing")
			continue
		}
		out = append(out, "file "+n+" "+strings.TrimSpace(string(b)))
	}
	return out, nil
}

// FilesHere reports a worker's directory and files.
var FilesHere = ray.Task1(filesHere)

func runFiles(ctx context.Context, names []string) error {
	// The driver's own view first, as "driver-cwd DIR" and
	// "driver-file NAME content".
	mine, err := filesHere(ctx, names)
	if err != nil {
		return err
	}
	for _, l := range mine {
		fmt.Println("driver-" + l)
	}
	return onEveryNode(ctx, func(node string) error {
		lines, err := FilesHere.Options(ray.NodeAffinity(node, false)).Remote(ctx, ray.V(names)).Get(ctx)
		if err != nil {
			return fmt.Errorf("task on node %s: %w", node, err)
		}
		for _, l := range lines {
			kind, rest, _ := strings.Cut(l, " ")
			fmt.Printf("%s %s %s\n", kind, node, rest)
		}
		return nil
	})
}

// testjob worker-dir DIR   runs FilesHere("config.txt") on every alive node
//                          with ray.WorkerDir(DIR), then without, then a
//                          task with it whose child runs without options,
//                          then an actor with it, and finally a task naming
//                          a missing directory; prints
//                          "worker-dir CALL NODE cwd=DIR config.txt=CONTENT"

// filesChild reports its own files and those of a task it submits without
// options.
func filesChild(ctx context.Context, names []string) ([]string, error) {
	mine, err := filesHere(ctx, names)
	if err != nil {
		return nil, err
	}
	child, err := FilesHere.Remote(ctx, ray.V(names)).Get(ctx)
	if err != nil {
		return nil, err
	}
	return append(mine, child...), nil
}

// FilesChild reports a worker's files and its child task's.
var FilesChild = ray.Task1(filesChild)

// DirActor reports the files its worker sees.
type DirActor struct{}

// NewDirActor is DirActor's constructor.
func NewDirActor(ctx context.Context) (*DirActor, error) { return &DirActor{}, nil }

// Files returns the files.
func (*DirActor) Files(ctx context.Context, names []string) ([]string, error) {
	return filesHere(ctx, names)
}

var (
	// DirActorClass is DirActor's class.
	DirActorClass = ray.Actor0(NewDirActor)
	// DirActorFiles is DirActor.Files.
	DirActorFiles = ray.Method1((*DirActor).Files)
)

func runWorkerDir(ctx context.Context, dir string) error {
	names := []string{"config.txt"}
	report := func(call, node string, lines []string) {
		fmt.Printf("worker-dir %s %s %s\n", call, node, strings.Join(lines, " | "))
	}
	err := onEveryNode(ctx, func(node string) error {
		lines, err := FilesHere.Options(ray.NodeAffinity(node, false), ray.WorkerDir(dir)).Remote(ctx, ray.V(names)).Get(ctx)
		if err != nil {
			return fmt.Errorf("task with WorkerDir on node %s: %w", node, err)
		}
		report("with", node, lines)
		lines, err = FilesHere.Options(ray.NodeAffinity(node, false)).Remote(ctx, ray.V(names)).Get(ctx)
		if err != nil {
			return fmt.Errorf("task on node %s: %w", node, err)
		}
		report("without", node, lines)
		return nil
	})
	if err != nil {
		return err
	}
	lines, err := FilesChild.Options(ray.WorkerDir(dir)).Remote(ctx, ray.V(names)).Get(ctx)
	if err != nil {
		return fmt.Errorf("parent task: %w", err)
	}
	report("parent", "-", lines[:2])
	report("child", "-", lines[2:])
	a := DirActorClass.Options(ray.WorkerDir(dir)).Remote(ctx)
	lines, err = DirActorFiles.On(a).Remote(ctx, ray.V(names)).Get(ctx)
	if err != nil {
		return fmt.Errorf("actor: %w", err)
	}
	report("actor", "-", lines)
	_, err = FilesHere.Options(ray.WorkerDir(dir+"/missing")).Remote(ctx, ray.V(names)).Get(ctx)
	fmt.Printf("worker-dir missing: %v\n", err)
	return nil
}
