package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/goray-dev/goray/cmd/goray/internal/bench"
	"github.com/spf13/cobra"
)

// microbenchmarkCmd runs Ray's core microbenchmark against goray, with this
// machine's limits measured in the same run.
func (a *app) microbenchmarkCmd() *cobra.Command {
	var (
		jsonPath, mdPath, docPath, filter, address string
		quick                                      bool
		settle                                     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "microbenchmark",
		Short: "Run Ray's core microbenchmark against goray, beside this machine's limits",
		Long: `Runs Ray's core microbenchmark (same metric names, workloads and timing:
1 s warm-up, 4 rounds of at least 2 s, mean and standard deviation) against a
fresh embedded node, or the cluster at --address. Before the metrics it
measures this machine's limits (memcpy, TCP and unix-socket loopback, a bare
gRPC and go-plugin round trip) and prints each goray figure that has a natural
limit with its ratio to it. Exits 1 only if a metric errors, never on figures.`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if settle < 0 {
				return usagef("--settle %s: want a duration of 0 or more (Ray sleeps 10s)", settle)
			}
			opts := bench.Options{Quick: quick, Address: address, Settle: settle, Log: a.stderr, Command: "goray " + strings.Join(a.args, " "), Commit: commitOverride}
			if filter != "" {
				re, err := regexp.Compile(filter)
				if err != nil {
					return usagef("--filter: %v", err)
				}
				opts.Filter = re
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := bench.Run(ctx, opts)
			if err != nil {
				return err
			}
			if err := rep.WriteTable(a.stdout); err != nil {
				return err
			}
			if jsonPath != "" {
				if err := writeFileWith(jsonPath, rep.WriteJSON); err != nil {
					return err
				}
			}
			if mdPath != "" {
				if err := writeFileWith(mdPath, rep.WriteMarkdown); err != nil {
					return err
				}
			}
			if docPath != "" {
				if err := updateDoc(docPath, rep); err != nil {
					return err
				}
			}
			if failed := rep.Failed(); len(failed) > 0 {
				names := make([]string, len(failed))
				for i, f := range failed {
					names[i] = f.Name + ": " + f.Error
				}
				return fmt.Errorf("%d metric(s) failed:\n  %s", len(failed), strings.Join(names, "\n  "))
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&jsonPath, "json", "", "also write the report as JSON to this file")
	f.StringVar(&mdPath, "markdown", "", "also write the report's tables as Markdown to this file")
	f.StringVar(&docPath, "doc", "", "rewrite the generated section of this Markdown file (between the goray:microbenchmark markers) with the report")
	f.BoolVar(&quick, "quick", false, "short rounds, for CI smoke runs")
	f.StringVar(&filter, "filter", "", "only run metrics and limits whose name matches this regular expression")
	f.StringVar(&address, "address", "", "cluster to run against (default: a fresh embedded node)")
	f.DurationVar(&settle, "settle", 0, "sleep this long before each metric to let the machine settle (Ray sleeps 10s; default: none)")
	return cmd
}

// commitOverride is the commit recorded in benchmark reports; set with
// -ldflags "-X main.commitOverride=<sha>" when the build has no VCS info.
var commitOverride = ""

// writeFileWith creates path (and its directory) and writes it with write.
func writeFileWith(path string, write func(w io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// Markers around the generated section of docs/benchmarks.md.
const (
	docBegin = "<!-- goray:microbenchmark:begin -->"
	docEnd   = "<!-- goray:microbenchmark:end -->"
)

// updateDoc replaces the text between the markers in path with the report's
// Markdown, keeping everything else (method, analysis) as written.
func updateDoc(path string, rep *bench.Report) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var md strings.Builder
	if err := rep.WriteMarkdown(&md); err != nil {
		return err
	}
	out, err := replaceBetween(string(old), docBegin, docEnd, md.String())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(out), 0o644)
}

// replaceBetween replaces the text between begin and end (markers kept).
func replaceBetween(doc, begin, end, content string) (string, error) {
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("no %q ... %q section to replace", begin, end)
	}
	return doc[:i+len(begin)] + "\n" + strings.TrimRight(content, "\n") + "\n" + doc[j:], nil
}
