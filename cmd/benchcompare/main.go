// Command benchcompare is the guard against call-rate regressions behind
// `make bench-compare BASE=<rev>`: it builds goray at a base revision and
// from the working tree, runs their microbenchmarks alternately in one
// session on this machine (base, head, head, base, ... so that a drift of
// the machine's load falls on both sides alike), and prints each metric's
// change with its spread: the median of the runs' means on each side, the
// range they span, and whether the ranges are apart.
//
// It is a developer's tool, not part of the runtime: figures depend on the
// machine and its load, so nothing in CI runs it, and an issue that
// touches a hot path closes with its output (CONTRIBUTING.md).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(1)
	}
}

// options are benchcompare's flags.
type options struct {
	base   string
	runs   int
	filter string
	quick  bool
	out    string
}

func run(args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet("benchcompare", flag.ContinueOnError)
	fs.StringVar(&o.base, "base", "", "the revision to compare the working tree with (required)")
	fs.IntVar(&o.runs, "runs", 3, "microbenchmark runs of each side")
	fs.StringVar(&o.filter, "filter", "", "only metrics and limits whose name matches this regular expression (goray microbenchmark --filter)")
	fs.BoolVar(&o.quick, "quick", false, "short rounds (goray microbenchmark --quick): a rough look, not a verdict")
	fs.StringVar(&o.out, "out", "bin/bench-compare", "where the binaries, the runs' JSON reports and their logs go")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case o.base == "":
		return errors.New("-base: a revision is required (make bench-compare BASE=<rev>)")
	case o.runs < 1:
		return fmt.Errorf("-runs %d: want at least 1", o.runs)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	out, err := filepath.Abs(o.out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	baseRev, err := gitOutput(ctx, "rev-parse", "--short", o.base+"^{commit}")
	if err != nil {
		return fmt.Errorf("-base %q: not a revision of this repository: %w", o.base, err)
	}
	headRev, err := gitOutput(ctx, "rev-parse", "--short", "HEAD")
	if err != nil {
		return err
	}
	if dirty, _ := gitOutput(ctx, "status", "--porcelain", "--untracked-files=no"); dirty != "" {
		headRev += "+changes"
	}

	fmt.Fprintf(stdout, "building goray at %s (base) and from the working tree (%s)\n", baseRev, headRev)
	baseBin, headBin := filepath.Join(out, "goray-base"), filepath.Join(out, "goray-head")
	if err := buildBase(ctx, o.base, filepath.Join(out, "base-tree"), baseBin); err != nil {
		return err
	}
	if err := goBuild(ctx, ".", headBin); err != nil {
		return fmt.Errorf("building the working tree: %w", err)
	}

	load0 := loadAvg()
	var base, head []report
	for i := range o.runs {
		order := []string{"base", "head"}
		if i%2 == 1 {
			order = []string{"head", "base"}
		}
		for _, side := range order {
			bin := baseBin
			if side == "head" {
				bin = headBin
			}
			name := filepath.Join(out, fmt.Sprintf("%s-%d", side, i+1))
			fmt.Fprintf(stdout, "run %d of %d: %s (load %s)\n", i+1, o.runs, side, loadAvg())
			r, err := microbenchmark(ctx, bin, name, o)
			if err != nil {
				return fmt.Errorf("%s run %d: %w (log: %s.log)", side, i+1, err, name)
			}
			if side == "base" {
				base = append(base, r)
			} else {
				head = append(head, r)
			}
		}
	}
	fmt.Fprintf(stdout, "\nbase %s vs head %s, %d run(s) each, alternating; load average %s at the start, %s at the end\n\n",
		baseRev, headRev, o.runs, load0, loadAvg())
	writeTable(stdout, compare(base, head))
	return nil
}

// buildBase builds cmd/goray of rev into bin from a detached worktree at
// dir, removed afterwards.
func buildBase(ctx context.Context, rev, dir, bin string) error {
	_ = exec.CommandContext(ctx, "git", "worktree", "remove", "--force", dir).Run()
	_ = os.RemoveAll(dir)
	if _, err := gitOutput(ctx, "worktree", "add", "--detach", dir, rev); err != nil {
		return fmt.Errorf("checking out %s: %w", rev, err)
	}
	defer func() {
		_ = exec.Command("git", "worktree", "remove", "--force", dir).Run()
	}()
	if err := goBuild(ctx, dir, bin); err != nil {
		return fmt.Errorf("building %s: %w", rev, err)
	}
	return nil
}

// goBuild builds ./cmd/goray of the module at dir into bin.
func goBuild(ctx context.Context, dir, bin string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/goray")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// microbenchmark runs bin's microbenchmark, writing name.json and
// name.log, and returns its report.
func microbenchmark(ctx context.Context, bin, name string, o options) (report, error) {
	args := []string{"microbenchmark", "--json", name + ".json"}
	if o.filter != "" {
		args = append(args, "--filter", o.filter)
	}
	if o.quick {
		args = append(args, "--quick")
	}
	log, err := os.Create(name + ".log")
	if err != nil {
		return report{}, err
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return report{}, err
	}
	b, err := os.ReadFile(name + ".json")
	if err != nil {
		return report{}, err
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return report{}, fmt.Errorf("%s.json: %w", name, err)
	}
	return r, nil
}

func gitOutput(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(b)), nil
}

// loadAvg returns the machine's 1, 5 and 15 minute load averages ("?"
// where /proc does not say).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
