package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/host/autoscalersvc"
	"github.com/goray-dev/goray/host/node"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/provider"
)

// loadCluster loads a cluster file, printing its warnings, and applies
// the flags to the head's settings; errors come back as the silent error
// reportDiagnostics returns after printing them.
func (a *app) loadCluster(path string, f config.Flags) (*config.Cluster, error) {
	c, diags := config.LoadCluster(path)
	if !diags.HasErrors() {
		f.LogLevel = a.logLevel
		c.Head.Override(f)
		diags = append(diags, c.Head.Validate()...)
	}
	if diags.HasErrors() {
		return nil, a.reportDiagnostics(&config.DiagnosticsError{Diags: diags, Files: c.Files()})
	}
	if len(diags) > 0 {
		w, col := termInfo(a.stderr)
		fmt.Fprint(a.stderr, config.FormatDiagnostics(diags, c.Files(), w, col))
	}
	return c, nil
}

func (a *app) upCmd() *cobra.Command {
	var lc lifecycle
	var block bool
	var readyFile string
	var f config.Flags
	cmd := &cobra.Command{
		Use:   "up CLUSTER_FILE",
		Short: "Start a cluster from a cluster file: its head, autoscaler and minimum workers",
		Long: "Start the cluster a cluster file describes: the head node runs on this machine (in the background\n" +
			"unless --block) with the file's node settings, and with it the provider plugin and the autoscaler,\n" +
			"which launches each node type's min_workers and then grows and shrinks the cluster with its demand.\n" +
			"`goray status` shows the autoscaler; `goray down CLUSTER_FILE` terminates everything.",
		Args: cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := a.loadCluster(args[0], f)
			if err != nil {
				return err
			}
			cfg := c.Head
			if err := lc.check(true); err != nil {
				return err
			}
			na, err := nodeCredentials(cfg)
			if err != nil {
				return err
			}
			if block {
				return a.runNode(cmd.Context(), cfg, readyFile, na, lc, c)
			}
			if err := a.startDaemon(cmd.Context(), cfg, na); err != nil {
				return err
			}
			writeUp(a, c)
			return nil
		}),
	}
	cmd.Flags().IntVar(&f.Port, "port", 0, "the head's GCS port (overrides the file's address or port)")
	cmd.Flags().StringVar(&f.TempDir, "temp-dir", "", "the head's root of session directories (overrides the file's temp_dir)")
	cmd.Flags().BoolVar(&lc.fresh, "fresh", false, "start a new cluster, discarding the one stored in the head's data directory or Redis (default: a new cluster after a clean goray down or stop, the stored one after a crash)")
	cmd.Flags().BoolVar(&lc.resume, "resume", false, "resume the cluster stored in the head's data directory or Redis, even after a clean goray down or stop")
	cmd.Flags().BoolVar(&block, "block", false, "run the head in the foreground until interrupted")
	cmd.Flags().StringVar(&readyFile, "ready-file", "", "write the head's info as JSON to this file once it serves")
	_ = cmd.Flags().MarkHidden("ready-file")
	return cmd
}

// writeUp says what the autoscaler will do.
func writeUp(a *app, c *config.Cluster) {
	fmt.Fprintf(a.stdout, "\nCluster %q: provider %q, at most %s.\n", c.Name, c.Provider.Name, plural(c.MaxWorkers, "worker", "workers"))
	t := newTable(a.stdout)
	for _, nt := range c.NodeTypes {
		if nt.Name == c.HeadNodeType {
			continue
		}
		t.row("  "+nt.Name+":", fmt.Sprintf("%s, min %d, max %d", formatFloats(nt.Resources), nt.MinWorkers, nt.MaxWorkers))
	}
	_ = t.flush()
	fmt.Fprintf(a.stdout, "The autoscaler launches the minimum workers now and more on demand; idle workers go after %s.\n", c.IdleTimeout)
	fmt.Fprintf(a.stdout, "To tear it all down:\n  goray down %s\n", shellQuote(c.Filename))
}

// formatFloats formats resource amounts as status does ("CPU: 2,
// memory: 4.0 GiB").
func formatFloats(m map[string]float64) string {
	set, err := resources.FromFloats(m)
	if err != nil {
		return fmt.Sprint(m)
	}
	return formatSet(amounts(set))
}

// shellQuote quotes s for a shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (a *app) downCmd() *cobra.Command {
	var workersOnly bool
	var timeout time.Duration
	var f config.Flags
	cmd := &cobra.Command{
		Use:   "down CLUSTER_FILE",
		Short: "Terminate every instance of a cluster, found through its provider, and stop its head",
		Long: "Stop the cluster's head on this machine (so that its autoscaler launches nothing more), then ask the\n" +
			"cluster's provider for every instance tagged with the cluster's name and terminate them, waiting until\n" +
			"the provider lists none. It works when the head is already gone: the provider alone knows the instances.",
		Args: cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return usagef("invalid --timeout %s: must be positive", timeout)
			}
			c, err := a.loadCluster(args[0], f)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			var errs []error
			if !workersOnly {
				errs = append(errs, a.stopClusterHead(ctx, c))
			}
			errs = append(errs, a.terminateInstances(ctx, c))
			return errors.Join(errs...)
		}),
	}
	cmd.Flags().StringVar(&f.TempDir, "temp-dir", "", "where the head's sessions are (as given to goray up; default the file's temp_dir)")
	cmd.Flags().BoolVar(&workersOnly, "workers-only", false, "terminate the worker instances only; leave the head running")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the instances to be gone")
	return cmd
}

// stopClusterHead stops the head of cluster c running on this machine
// under the cluster's temp dir, if there is one.
func (a *app) stopClusterHead(ctx context.Context, c *config.Cluster) error {
	root := absPath(c.Head.TempDir)
	p := procFS{a.procRoot}
	ss, err := p.sessions(root)
	if err != nil {
		return err
	}
	var heads []session
	for _, s := range ss {
		if s.Running && s.Info != nil && s.Info.Head && s.Info.ClusterName == c.Name {
			heads = append(heads, s)
		}
	}
	if len(heads) == 0 {
		fmt.Fprintf(a.stdout, "No head of cluster %q runs under %s.\n", c.Name, root)
		// A head killed before (kill -9, a crash) left its files.
		s := &stopper{proc: p, root: root, log: a.log}
		var res stopResult
		err := s.cleanDead(&res)
		writeCleanResult(a.stdout, res)
		return err
	}
	na, err := nodeCredentials(c.Head)
	if err != nil {
		a.log.Debug("no credentials for the shutdown request; the head gets SIGTERM", "error", err)
	}
	s := &stopper{proc: p, root: root, opts: stopOptions{grace: 30 * time.Second}, log: a.log, skip: []int{os.Getpid(), os.Getppid()}, creds: na.creds}
	stopped, err := s.stopNodes(ctx, heads)
	for _, n := range stopped {
		fmt.Fprintf(a.stdout, "Stopped the head of cluster %q (node %s, pid %d, %s).\n", c.Name, shortHex(n.NodeID), n.Pid, n.How)
	}
	// Only the stopped heads' workers: other nodes may share the temp dir.
	if _, kerr := s.killLeftovers(ctx, heads); kerr != nil {
		err = errors.Join(err, kerr)
	}
	var res stopResult
	err = errors.Join(err, s.cleanDead(&res))
	writeCleanResult(a.stdout, res)
	return err
}

// terminateInstances terminates every instance the provider lists for the
// cluster and waits until it lists none.
func (a *app) terminateInstances(ctx context.Context, c *config.Cluster) error {
	sock, err := os.MkdirTemp("", "goray-down-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(sock)
	m := host.New(host.Options{
		PluginDir: node.PluginDir(c.Head), Blocks: []config.Plugin{node.ProviderBlock(c)}, Files: c.Files(),
		Logger: a.log.Named("plugins"), SocketDir: sock,
		Supported: map[string][]int{plugin.KindProvider: {provider.APIVersion}},
	})
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(sctx)
	}()
	if diags := m.Start(ctx); diags.HasErrors() {
		return a.reportDiagnostics(&config.DiagnosticsError{Diags: diags, Files: c.Files()})
	}
	p := autoscalersvc.ProviderOf(m, c.Provider.Name)
	list, err := p.List(ctx, &provider.ListRequest{ClusterName: c.Name})
	if err != nil {
		return fmt.Errorf("listing the instances of cluster %q: %w", c.Name, err)
	}
	if len(list.Instances) == 0 {
		fmt.Fprintf(a.stdout, "Cluster %q has no instances.\n", c.Name)
		return nil
	}
	ids := make([]string, 0, len(list.Instances))
	var names []string
	for _, in := range list.Instances {
		ids = append(ids, in.ID)
		names = append(names, fmt.Sprintf("%s (%s, %s)", in.ID, in.NodeType, orDash(in.Address)))
	}
	fmt.Fprintf(a.stdout, "Terminating %s of cluster %q: %s\n", plural(len(ids), "instance", "instances"), c.Name, strings.Join(names, ", "))
	if _, err := p.Terminate(ctx, &provider.TerminateRequest{RequestID: fmt.Sprintf("down-%d", time.Now().UnixNano()), ClusterName: c.Name, InstanceIDs: ids}); err != nil {
		return fmt.Errorf("terminating the instances of cluster %q: %w", c.Name, err)
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	setSpin, stopSpin := a.spinner(fmt.Sprintf("waiting for %s to terminate", plural(len(ids), "instance", "instances")))
	defer stopSpin()
	for {
		list, err := p.List(ctx, &provider.ListRequest{ClusterName: c.Name})
		if err == nil && len(list.Instances) == 0 {
			break
		}
		if err == nil {
			setSpin(fmt.Sprintf("waiting for %s to terminate", plural(len(list.Instances), "instance", "instances")))
		}
		select {
		case <-ctx.Done():
			left := 0
			if list != nil {
				left = len(list.Instances)
			}
			return fmt.Errorf("cluster %q still has %d instances after the timeout (last error: %v): %w", c.Name, left, err, ctx.Err())
		case <-tick.C:
		}
	}
	if errs, err := p.PollErrors(ctx, &provider.PollErrorsRequest{ClusterName: c.Name}); err == nil {
		for _, e := range errs.Errors {
			if e.Op == provider.ErrorOpTerminate {
				fmt.Fprintf(a.stderr, "Warning: terminating %s: %s\n", orDash(e.InstanceID), e.Message)
			}
		}
	}
	stopSpin()
	fmt.Fprintf(a.stdout, "All instances of cluster %q are terminated.\n", c.Name)
	return nil
}
