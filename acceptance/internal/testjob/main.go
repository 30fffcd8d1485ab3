// Command testjob is the driver program of goray's acceptance tests. One
// binary, several jobs, chosen by the first argument:
//
//	testjob retry DIR        a task killed once is retried; a task killed on
//	                         every attempt fails with WorkerCrashedError
//	testjob panic            a panicking task comes back as a typed error
//	testjob timeout          Get with a 200 ms deadline on a long task
//	testjob missing          a task registered after Init is unknown to workers
//	testjob long DIR         a task that blocks for a long time (the test kills
//	                         the node under it)
//	testjob bigargs          fresh workers read a store argument at once
//	testjob hold DIR NAME    a named actor, objects and a running task held
//	                         until DIR/release exists
//	testjob env NAME...      a task on every node reports its worker's NAME
//	                         variables (env.go)
//	testjob job-exit CODE    exits with CODE (jobs.go)
//	testjob job-hold NODE    an actor and a task on NODE, held until stopped
//	testjob logs NODE DIR M  a task and an actor on NODE print M (logs.go)
//	testjob metrics NODE DIR N SIZE  N tasks here and N on NODE, then a put
//	                         of SIZE bytes held until DIR/release (metrics.go)
//
// and the multi-node jobs of cluster.go, deaths.go and restart.go, the memory
// monitor's of memory.go, the actor task retries' of taskretry.go, and the
// autoscaler's of autoscale.go. $TESTJOB_TIMEOUT bounds the job (default
// 55s).
//
// It connects to $GORAY_ADDRESS, or runs an embedded node when that is
// unset. Tasks that the test must kill write their pid to
// DIR/<name>.<attempt>.pid. Results are printed as "key: value" lines; the
// last line is "PASS <mode>" (exit 0) or "FAIL: why" (exit 1).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// blockUntilKilled writes its worker's pid to dir/name.<attempt>.pid and
// blocks until its process is killed. With succeedOnRetry, retries (attempt
// > 0) return the attempt number at once.
func blockUntilKilled(ctx context.Context, dir, name string, succeedOnRetry bool) (int, error) {
	tc, ok := ray.CurrentTask(ctx)
	if !ok {
		return -1, errors.New("no task context")
	}
	if succeedOnRetry && tc.Attempt > 0 {
		return tc.Attempt, nil
	}
	if err := writeFile(filepath.Join(dir, fmt.Sprintf("%s.%d.pid", name, tc.Attempt)), fmt.Sprint(os.Getpid())); err != nil {
		return -1, err
	}
	select {
	case <-ctx.Done():
		return -1, ctx.Err()
	case <-time.After(45 * time.Second):
	}
	return -1, fmt.Errorf("%s: attempt %d (pid %d) was not killed", name, tc.Attempt, os.Getpid())
}

// explodeInTask panics with msg from a nested call.
func explodeInTask(ctx context.Context, msg string) (int, error) {
	return detonate(msg), nil
}

//go:noinline
func detonate(msg string) int { panic("acceptance panic: " + msg) }

// sleepTask sleeps for d.
func sleepTask(ctx context.Context, d time.Duration) (int, error) {
	time.Sleep(d)
	return int(d / time.Millisecond), nil
}

// lateTask is registered only after Init, in main: workers never have it.
func lateTask(ctx context.Context, x int) (int, error) { return x, nil }

// waitForFile returns once path exists.
func waitForFile(ctx context.Context, path string) (int, error) {
	if err := pollFile(ctx, path); err != nil {
		return 0, err
	}
	return 1, nil
}

// byteLen returns the length of b.
func byteLen(ctx context.Context, b []byte) (int, error) { return len(b), nil }

// Holder is an actor that holds a value.
type Holder struct{ v string }

// NewHolder is Holder's constructor.
func NewHolder(ctx context.Context, v string) (*Holder, error) { return &Holder{v: v}, nil }

// Get returns the held value.
func (h *Holder) Get(ctx context.Context) (string, error) { return h.v, nil }

// Pid returns the actor's process id.
func (h *Holder) Pid(ctx context.Context) (int, error) { return os.Getpid(), nil }

var (
	// BlockUntilKilled is the task the tests kill.
	BlockUntilKilled = ray.Task3(blockUntilKilled)
	// ExplodeInTask panics.
	ExplodeInTask = ray.Task1(explodeInTask)
	// SleepTask sleeps.
	SleepTask = ray.Task1(sleepTask)
	// WaitForFile waits for a file.
	WaitForFile = ray.Task1(waitForFile)
	// ByteLen measures a byte slice.
	ByteLen = ray.Task1(byteLen)
	// HolderActor is the actor class.
	HolderActor = ray.Actor1(NewHolder)
	// HolderGet reads the held value.
	HolderGet = ray.Method0((*Holder).Get)
	// HolderPid returns the actor's pid.
	HolderPid = ray.Method0((*Holder).Pid)
)

func main() {
	// In a worker this serves tasks and never returns.
	timeout := 55 * time.Second
	if d, err := time.ParseDuration(os.Getenv("TESTJOB_TIMEOUT")); err == nil {
		timeout = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var opts []ray.InitOption
	if len(os.Args) < 2 || os.Args[1] != "logs" {
		opts = append(opts, ray.WorkerOutput(os.Stderr))
	}
	if d, err := time.ParseDuration(os.Getenv("TESTJOB_TRANSFER_TIMEOUT")); err == nil {
		opts = append(opts, ray.TensorTransferTimeout(d))
	}
	if fwd := os.Getenv("TESTJOB_FORWARD_ENV"); fwd != "" {
		opts = append(opts, ray.ForwardEnv(strings.Split(fwd, ",")...))
	}
	if set := os.Getenv("TESTJOB_ENV_VARS"); set != "" { // NAME=value,...
		vars := map[string]string{}
		for kv := range strings.SplitSeq(set, ",") {
			name, val, _ := strings.Cut(kv, "=")
			vars[name] = val
		}
		opts = append(opts, ray.EnvVars(vars))
	}
	if wd := os.Getenv("TESTJOB_WORKING_DIR"); wd != "" { // DIR[,EXCLUDE...]
		f := strings.Split(wd, ",")
		opts = append(opts, ray.WorkingDir(f[0], f[1:]...))
	}
	rt, err := ray.Init(ctx, opts...)
	if err != nil {
		fmt.Println("FAIL: init:", err)
		os.Exit(1)
	}
	if len(os.Args) < 2 {
		fail(rt, "usage: testjob MODE [ARGS]")
	}
	mode, args := os.Args[1], os.Args[2:]
	fmt.Println("node:", rt.NodeID())
	var runErr error
	switch mode {
	case "retry":
		runErr = runRetry(ctx, arg(rt, args, 0))
	case "panic":
		runErr = runPanic(ctx)
	case "timeout":
		runErr = runTimeout(ctx)
	case "missing":
		runErr = runMissing(ctx)
	case "long":
		runErr = runLong(ctx, arg(rt, args, 0))
	case "tensors":
		runErr = runTensors(ctx)
	case "tensors-timeout":
		runErr = runTensorsTimeout(ctx, arg(rt, args, 0))
	case "tensors-restart":
		runErr = runTensorsRestart(ctx, arg(rt, args, 0))
	case "tensors-direct":
		runErr = runTensorsDirect(ctx, arg(rt, args, 0))
	case "tensors-pyshm":
		runErr = runTensorsPyshm(ctx)
	case "bigargs":
		runErr = runBigArgs(ctx)
	case "hold":
		runErr = runHold(ctx, arg(rt, args, 0), arg(rt, args, 1))
	case "ship":
		runErr = runShip(ctx)
	case "env":
		runErr = runEnv(ctx, args)
	case "files":
		runErr = runFiles(ctx, args)
	case "worker-env":
		runErr = runWorkerEnv(ctx)
	case "worker-dir":
		runErr = runWorkerDir(ctx, arg(rt, args, 0))
	case "where":
		runErr = runWhere(ctx, arg(rt, args, 0))
	case "fetch-local":
		runErr = runFetchLocal(ctx, arg(rt, args, 0))
	case "state":
		runErr = runState(ctx, arg(rt, args, 0))
	case "pending":
		runErr = runPending(ctx, arg(rt, args, 0))
	case "spill":
		runErr = runSpill(ctx, arg(rt, args, 0), arg(rt, args, 1), arg(rt, args, 2))
	case "lineage":
		runErr = runLineage(ctx, arg(rt, args, 0), arg(rt, args, 1))
	case "copies":
		runErr = runCopiesFreed(ctx, arg(rt, args, 0), arg(rt, args, 1))
	case "deaths":
		runErr = runDeaths(ctx, arg(rt, args, 0), arg(rt, args, 1), arg(rt, args, 2), arg(rt, args, 3))
	case "secondaries":
		runErr = runSecondaries(ctx, arg(rt, args, 0), arg(rt, args, 1), arg(rt, args, 2))
	case "spill-nodekill":
		runErr = runSpillNodeKill(ctx, arg(rt, args, 0), arg(rt, args, 1), arg(rt, args, 2), arg(rt, args, 3), arg(rt, args, 4))
	case "nodekill":
		runErr = runNodeKill(ctx, arg(rt, args, 0), arg(rt, args, 1))
	case "restart":
		runErr = runRestart(ctx, arg(rt, args, 0), arg(rt, args, 1), false)
	case "restart-frozen":
		runErr = runRestart(ctx, arg(rt, args, 0), arg(rt, args, 1), true)
	case "coll-ops":
		runErr = runCollOps(ctx, arg(rt, args, 0), arg(rt, args, 1))
	case "coll-p2p":
		runErr = runCollP2P(ctx, arg(rt, args, 0), arg(rt, args, 1))
	case "coll-kill":
		runErr = runCollKill(ctx, arg(rt, args, 0), arg(rt, args, 1), arg(rt, args, 2))
	case "transports-where":
		runErr = runTransportsWhere(ctx, arg(rt, args, 0), arg(rt, args, 1))
	case "recv-leak":
		runErr = runRecvLeak(ctx, arg(rt, args, 0), arg(rt, args, 1))
	case "os-reads":
		runErr = runOneSidedReads(ctx, arg(rt, args, 0), arg(rt, args, 1), arg(rt, args, 2))
	case "os-abort":
		runErr = runOneSidedAbort(ctx, arg(rt, args, 0), arg(rt, args, 1), arg(rt, args, 2))
	case "pg-strategies":
		runErr = runPGStrategies(ctx)
	case "pg-wait":
		runErr = runPGWait(ctx, arg(rt, args, 0))
	case "pg-hold":
		runErr = runPGHold(ctx, arg(rt, args, 0), arg(rt, args, 1), arg(rt, args, 2), arg(rt, args, 3))
	case "pg-race":
		runErr = runPGRace(ctx)
	case "pg-nodekill":
		runErr = runPGNodeKill(ctx, arg(rt, args, 0), arg(rt, args, 1))
	case "pg-detached":
		runErr = runPGDetached(ctx, arg(rt, args, 0))
	case "gcs-ft":
		runErr = runGCSFT(ctx, arg(rt, args, 0))
	case "holder-node":
		runErr = runHolderNode(ctx, arg(rt, args, 0), arg(rt, args, 1), arg(rt, args, 2))
	case "pg-children":
		runErr = runPGChildren(ctx, arg(rt, args, 0), arg(rt, args, 1), arg(rt, args, 2))
	case "pg-elsewhere":
		runErr = runPGElsewhere(ctx, arg(rt, args, 0))
	case "pg-lookup":
		runErr = runPGLookup(ctx, arg(rt, args, 0))
	case "as-burst":
		runErr = runASBurst(ctx, arg(rt, args, 0), arg(rt, args, 1))
	case "as-actors":
		runErr = runASActors(ctx, arg(rt, args, 0), arg(rt, args, 1))
	case "as-request":
		runErr = runASRequest(ctx, arg(rt, args, 0))
	case "as-infeasible":
		runErr = runASInfeasible(ctx, arg(rt, args, 0))
	case "as-pg":
		runErr = runASPG(ctx, arg(rt, args, 0))
	case "as-object":
		runErr = runASObject(ctx, arg(rt, args, 0))
	case "metrics":
		runErr = runMetrics(ctx, arg(rt, args, 0), arg(rt, args, 1), arg(rt, args, 2), arg(rt, args, 3))
	case "logs":
		runErr = runLogs(ctx, arg(rt, args, 0), arg(rt, args, 1), arg(rt, args, 2))
	case "log-flood":
		runErr = runLogFlood(ctx, arg(rt, args, 0), arg(rt, args, 1))
	case "job-exit":
		runErr = runJobExit(arg(rt, args, 0))
	case "job-hold":
		runErr = runJobHold(ctx, arg(rt, args, 0))
	case "oom":
		runErr = runOOM(ctx, arg(rt, args, 0), arg(rt, args, 1))
	case "oom-neighbour":
		runErr = runOOMNeighbour(ctx, arg(rt, args, 0))
	case "taskretry":
		runErr = runTaskRetry(ctx, arg(rt, args, 0))
	case "actor-outage":
		runErr = runActorOutage(ctx, arg(rt, args, 0))
	default:
		runErr = fmt.Errorf("unknown mode %q", mode)
	}
	if runErr != nil {
		fail(rt, runErr.Error())
	}
	if err := rt.Shutdown(context.Background()); err != nil {
		fmt.Println("FAIL: shutdown:", err)
		os.Exit(1)
	}
	fmt.Println("PASS", mode)
}

func arg(rt *ray.Runtime, args []string, i int) string {
	if i >= len(args) {
		fail(rt, fmt.Sprintf("missing argument %d", i+1))
	}
	return args[i]
}

func fail(rt *ray.Runtime, msg string) {
	fmt.Println("FAIL:", msg)
	_ = rt.Shutdown(context.Background())
	os.Exit(1)
}

// runRetry: the test kills the first attempt of "first" (which then
// succeeds on its retry) and every attempt of "second" (MaxRetries(1)).
func runRetry(ctx context.Context, dir string) error {
	got, err := BlockUntilKilled.Remote(ctx, ray.V(dir), ray.V("first"), ray.V(true)).Get(ctx)
	if err != nil {
		return fmt.Errorf("first task: %w", err)
	}
	fmt.Println("first attempt:", got)
	if got != 1 {
		return fmt.Errorf("first task returned attempt %d, want 1 (one retry after the kill)", got)
	}
	_, err = BlockUntilKilled.Options(ray.MaxRetries(1)).Remote(ctx, ray.V(dir), ray.V("second"), ray.V(false)).Get(ctx)
	fmt.Println("second error:", err)
	var wc *ray.WorkerCrashedError
	if !errors.As(err, &wc) {
		return fmt.Errorf("second task: want a *ray.WorkerCrashedError, got %T %v", err, err)
	}
	fmt.Println("second attempts:", wc.Attempts)
	fmt.Println("second is ErrWorkerCrashed:", errors.Is(err, ray.ErrWorkerCrashed))
	if !errors.Is(err, ray.ErrWorkerCrashed) || wc.Attempts != 2 {
		return fmt.Errorf("second task: want ErrWorkerCrashed after 2 attempts, got %d attempts: %v", wc.Attempts, err)
	}
	return nil
}

// runPanic runs a panicking task and prints the typed error.
func runPanic(ctx context.Context) error {
	_, err := ExplodeInTask.Remote(ctx, ray.V("the fuse was lit")).Get(ctx)
	fmt.Println("error:", err)
	var te *ray.TaskError
	if !errors.As(err, &te) {
		return fmt.Errorf("want a *ray.TaskError, got %T %v", err, err)
	}
	fmt.Println("is ErrPanic:", errors.Is(err, ray.ErrPanic))
	fmt.Println("is ErrTaskFailed:", errors.Is(err, ray.ErrTaskFailed))
	fmt.Println("message:", te.Message)
	fmt.Println("function:", te.Function)
	fmt.Println("stack:")
	fmt.Println(te.Stack)
	if !errors.Is(err, ray.ErrPanic) {
		return fmt.Errorf("want an error matching ErrPanic, got %v", err)
	}
	return nil
}

// runTimeout runs Get with a 200 ms deadline on a task that sleeps 30 s.
func runTimeout(ctx context.Context) error {
	slow := SleepTask.Remote(ctx, ray.V(30*time.Second))
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := slow.Get(short)
	elapsed := time.Since(start)
	fmt.Println("error:", err)
	fmt.Println("elapsed ms:", elapsed.Milliseconds())
	fmt.Println("is ErrGetTimeout:", errors.Is(err, ray.ErrGetTimeout))
	fmt.Println("is DeadlineExceeded:", errors.Is(err, context.DeadlineExceeded))
	var gt *ray.GetTimeoutError
	if !errors.As(err, &gt) || !errors.Is(err, ray.ErrGetTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("want a GetTimeoutError matching ErrGetTimeout and DeadlineExceeded, got %T %v", err, err)
	}
	return nil
}

// runMissing calls a task that only the driver registered.
func runMissing(ctx context.Context) error {
	late := ray.Task1(lateTask) // after Init: workers never run this line
	fmt.Println("name:", late.Name())
	_, err := late.Remote(ctx, ray.V(7)).Get(ctx)
	fmt.Println("error:", err)
	fmt.Println("is ErrFunctionNotFound:", errors.Is(err, ray.ErrFunctionNotFound))
	if !errors.Is(err, ray.ErrFunctionNotFound) {
		return fmt.Errorf("want ErrFunctionNotFound, got %T %v", err, err)
	}
	return nil
}

// runLong blocks in a task until its worker dies; it prints what Get
// returned and fails when Get returns no error.
func runLong(ctx context.Context, dir string) error {
	_, err := BlockUntilKilled.Remote(ctx, ray.V(dir), ray.V("long"), ray.V(false)).Get(ctx)
	fmt.Println("long error:", err)
	if err == nil {
		return errors.New("the long task returned without an error")
	}
	return fmt.Errorf("long task: %w", err)
}

// runBigArgs passes a store object (above the inline limit) to tasks that
// start many fresh workers at once (each task takes an eighth of a CPU), so that
// each worker's first task reads a store argument.
func runBigArgs(ctx context.Context) error {
	big, err := ray.Put(ctx, make([]byte, 1<<20))
	if err != nil {
		return err
	}
	var refs []ray.Ref[int]
	for i := 0; i < 16; i++ {
		refs = append(refs, ByteLen.Options(ray.CPUs(0.125)).Remote(ctx, big))
	}
	failed := 0
	for i, r := range refs {
		n, err := r.Get(ctx)
		if err != nil || n != 1<<20 {
			failed++
			fmt.Printf("task %d: ByteLen(big) = %d, %v\n", i, n, err)
		}
	}
	fmt.Println("failed tasks:", failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d tasks could not read their store argument", failed, len(refs))
	}
	return nil
}

// holdState is what runHold writes to DIR/ready.
type holdState struct {
	ActorPid int    `json:"actor_pid"`
	SmallID  string `json:"small_id"`
	BigID    string `json:"big_id"`
	TaskRef  string `json:"task_ref"`
}

// runHold creates a named actor, puts objects and starts a task, writes
// DIR/ready and waits for DIR/release.
func runHold(ctx context.Context, dir, name string) error {
	h := HolderActor.Options(ray.Name(name)).Remote(ctx, ray.V("held"))
	if err := h.Ready(ctx); err != nil {
		return fmt.Errorf("actor %s: %w", name, err)
	}
	pid, err := HolderPid.On(h).Remote(ctx).Get(ctx)
	if err != nil {
		return err
	}
	small, err := ray.Put(ctx, "a small value")
	if err != nil {
		return err
	}
	big, err := ray.Put(ctx, make([]byte, 1<<20))
	if err != nil {
		return err
	}
	release := filepath.Join(dir, "release")
	waiting := WaitForFile.Remote(ctx, ray.V(release))
	st := holdState{ActorPid: pid, SmallID: small.ID(), BigID: big.ID(), TaskRef: waiting.ID()}
	b, _ := json.Marshal(st)
	if err := writeFile(filepath.Join(dir, "ready"), string(b)); err != nil {
		return err
	}
	fmt.Println("ready:", string(b))
	if err := pollFile(ctx, release); err != nil {
		return err
	}
	if v, err := waiting.Get(ctx); err != nil || v != 1 {
		return fmt.Errorf("WaitForFile = %d, %v", v, err)
	}
	if v, err := HolderGet.On(h).Remote(ctx).Get(ctx); err != nil || v != "held" {
		return fmt.Errorf("actor value = %q, %v", v, err)
	}
	runtime.KeepAlive(small)
	runtime.KeepAlive(big)
	return nil
}

// writeFile writes content to path atomically.
func writeFile(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// pollFile returns once path exists or ctx ends.
func pollFile(ctx context.Context, path string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}
