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
	nodes, err := ray.Nodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if !n.Alive {
			continue
		}
		lines, err := FilesHere.Options(ray.NodeAffinity(n.ID, false)).Remote(ctx, ray.V(names)).Get(ctx)
		if err != nil {
			return fmt.Errorf("task on node %s: %w", n.ID, err)
		}
		for _, l := range lines {
			kind, rest, _ := strings.Cut(l, " ")
			fmt.Printf("%s %s %s\n", kind, n.ID, rest)
		}
	}
	return nil
}
