package main

// testjob worker-env   runs tasks and an actor with ray.WorkerEnv and
//                      prints what their workers see, one line per call:
//                      "worker-env CALL NAME=value ..." (or "NAME unset")
//
// The job sets JOBVAR=job and SHARED=job with ray.EnvVars ($TESTJOB_ENV_VARS).

import (
	"context"
	"fmt"
	"strings"

	"github.com/goray-dev/goray/sdk/ray"
)

var envNames = []string{"JOBVAR", "SHARED", "TASKVAR", "ACTORVAR"}

// envChild reports its own worker's variables and those of a task it
// submits without options.
func envChild(ctx context.Context, names []string) ([]string, error) {
	mine, err := envOf(ctx, names)
	if err != nil {
		return nil, err
	}
	child, err := EnvOf.Remote(ctx, ray.V(names)).Get(ctx)
	if err != nil {
		return nil, err
	}
	return append(mine, child...), nil
}

// EnvChild reports a worker's variables and its child task's.
var EnvChild = ray.Task1(envChild)

// EnvActor reports its worker's variables.
type EnvActor struct{}

// NewEnvActor is EnvActor's constructor.
func NewEnvActor(ctx context.Context) (*EnvActor, error) { return &EnvActor{}, nil }

// Env returns the variables.
func (*EnvActor) Env(ctx context.Context, names []string) ([]string, error) {
	return envOf(ctx, names)
}

var (
	// EnvActorClass is EnvActor's class.
	EnvActorClass = ray.Actor0(NewEnvActor)
	// EnvActorEnv is EnvActor.Env.
	EnvActorEnv = ray.Method1((*EnvActor).Env)
)

func runWorkerEnv(ctx context.Context) error {
	report := func(call string, vals []string, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", call, err)
		}
		fmt.Printf("worker-env %s %s\n", call, strings.Join(vals, " "))
		return nil
	}
	vals, err := EnvOf.Remote(ctx, ray.V(envNames)).Get(ctx)
	if err := report("plain", vals, err); err != nil {
		return err
	}
	vals, err = EnvOf.Options(ray.WorkerEnv(map[string]string{"TASKVAR": "task", "SHARED": "task"})).Remote(ctx, ray.V(envNames)).Get(ctx)
	if err := report("task", vals, err); err != nil {
		return err
	}
	// The same function again without: a worker of the job's own.
	vals, err = EnvOf.Remote(ctx, ray.V(envNames)).Get(ctx)
	if err := report("plain-again", vals, err); err != nil {
		return err
	}
	// A child inherits its parent's variables.
	vals, err = EnvChild.Options(ray.WorkerEnv(map[string]string{"TASKVAR": "parent"})).Remote(ctx, ray.V(envNames)).Get(ctx)
	if err != nil {
		return report("parent", nil, err)
	}
	if err := report("parent", vals[:len(envNames)], nil); err != nil {
		return err
	}
	if err := report("child", vals[len(envNames):], nil); err != nil {
		return err
	}
	a := EnvActorClass.Options(ray.WorkerEnv(map[string]string{"ACTORVAR": "actor"})).Remote(ctx)
	vals, err = EnvActorEnv.On(a).Remote(ctx, ray.V(envNames)).Get(ctx)
	return report("actor", vals, err)
}
