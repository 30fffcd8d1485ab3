package main

// testjob env NAME...   runs a task on every alive node that reports the
//                       variables NAME... of its worker's environment, as
//                       "env <node> NAME=value" or "env <node> NAME unset"
//
// $TESTJOB_FORWARD_ENV (comma-separated) is passed to ray.ForwardEnv.

import (
	"context"
	"fmt"
	"os"

	"github.com/goray-dev/goray/sdk/ray"
)

// envOf returns, for each name, "NAME=value" or "NAME unset" as the
// worker running the task sees it.
func envOf(ctx context.Context, names []string) ([]string, error) {
	out := make([]string, len(names))
	for i, n := range names {
		if v, ok := os.LookupEnv(n); ok {
			out[i] = n + "=" + v
		} else {
			out[i] = n + " unset"
		}
	}
	return out, nil
}

// EnvOf reports a worker's environment.
var EnvOf = ray.Task1(envOf)

func runEnv(ctx context.Context, names []string) error {
	return onEveryNode(ctx, func(node string) error {
		vals, err := EnvOf.Options(ray.NodeAffinity(node, false)).Remote(ctx, ray.V(names)).Get(ctx)
		if err != nil {
			return fmt.Errorf("task on node %s: %w", node, err)
		}
		for _, v := range vals {
			fmt.Printf("env %s %s\n", node, v)
		}
		return nil
	})
}

// onEveryNode calls fn with the id of each alive node, in turn.
func onEveryNode(ctx context.Context, fn func(node string) error) error {
	nodes, err := ray.Nodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if !n.Alive {
			continue
		}
		if err := fn(n.ID); err != nil {
			return err
		}
	}
	return nil
}
