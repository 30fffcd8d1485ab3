package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/goray-dev/goray/dashboard/jobclient"
	"github.com/goray-dev/goray/dashboard/jobs"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/workdir"
)

// envDashboardAddress is the head's dashboard (job API) address `goray job`
// uses when --address is not given: "host:port" or "http(s)://host:port"
// (Ray's jobs CLI reads RAY_ADDRESS=http://...:8265; ours keeps
// $GORAY_ADDRESS for the GCS).
const envDashboardAddress = "GORAY_DASHBOARD_ADDRESS"

// dashboardURL is the URL of a dashboard at addr (host:port).
func dashboardURL(addr string, tls bool) string {
	if tls {
		return "https://" + addr
	}
	return "http://" + addr
}

// jobFlags are the flags every `goray job` command takes.
type jobFlags struct {
	address string
	tempDir string
}

func (f *jobFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.address, "address", "", "the head's dashboard, http://HOST:PORT (default: $"+envDashboardAddress+", else the head of $"+envAddress+", else the head running under --temp-dir)")
	cmd.Flags().StringVar(&f.tempDir, "temp-dir", defaultTempDir, "where to look for a running head when no address is given")
}

// jobClient resolves the head's dashboard and returns a client with the
// CLI's credentials.
func (a *app) jobClient(ctx context.Context, f jobFlags) (*jobclient.Client, error) {
	creds, err := a.clientCreds(f.tempDir)
	if err != nil {
		return nil, err
	}
	addr := f.address
	if addr == "" {
		addr = strings.TrimSpace(a.getenv(envDashboardAddress))
	}
	if addr == "" {
		gcs := strings.TrimSpace(a.getenv(envAddress))
		if gcs == "" {
			info, err := procFS{a.procRoot}.findHead(f.tempDir)
			if err != nil {
				return nil, fmt.Errorf("%w (or give the head's dashboard with --address or $%s)", err, envDashboardAddress)
			}
			addr, gcs = info.DashboardAddress, info.GCSAddress
		}
		if addr == "" {
			if addr, err = headDashboard(ctx, gcs, creds); err != nil {
				return nil, err
			}
		}
	}
	a.log.Debug("job API", "address", addr)
	return jobclient.New(addr, creds)
}

// headDashboard asks the GCS at gcs for its head's dashboard address.
func headDashboard(ctx context.Context, gcs string, creds *auth.Credentials) (string, error) {
	c, err := dialCluster(gcs, creds)
	if err != nil {
		return "", err
	}
	defer c.conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return "", err
	}
	for _, n := range nodes {
		if i := n.GetInfo(); i.GetIsHead() && i.GetState() == "ALIVE" {
			if i.GetDashboardAddr() == "" {
				return "", fmt.Errorf("the head of the cluster at %s serves no dashboard (started with --include-dashboard=false?)", gcs)
			}
			return i.GetDashboardAddr(), nil
		}
	}
	return "", fmt.Errorf("the cluster at %s has no alive head", gcs)
}

func (a *app) jobCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Submit jobs to a cluster's head and follow them",
		Long: "Run a program on a cluster's head as a driver: `goray job submit` uploads its binary (only when the\n" +
			"head lacks it), starts it there and, unless --no-wait, prints its output and exits with its status.\n" +
			"Jobs and their logs live on the head: they go on when the client goes away (see docs/jobs.md).",
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.jobSubmitCmd(), a.jobStatusCmd(), a.jobLogsCmd(), a.jobStopCmd(), a.jobListCmd(), a.jobDeleteCmd())
	return cmd
}

func (a *app) jobSubmitCmd() *cobra.Command {
	var f jobFlags
	var env, metadata []string
	var id, workingDir string
	var excludes []string
	var noWait, wait bool
	cmd := &cobra.Command{
		Use:   "submit [flags] -- BINARY [ARGS...]",
		Short: "Upload a program and run it on the head as a driver",
		Long: "Upload BINARY (a goray driver built for the head's machine; only when the head lacks it) and run it\n" +
			"there with ARGS, GORAY_ADDRESS of the cluster and the cluster token. Without --no-wait, print its\n" +
			"output as it comes and exit 0 when it SUCCEEDED, 1 otherwise.",
		Args: cobra.MinimumNArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if noWait && wait {
				return usagef("--wait and --no-wait contradict each other")
			}
			if len(excludes) > 0 && workingDir == "" {
				return usagef("--exclude needs --working-dir")
			}
			meta := map[string]string{}
			for _, kv := range metadata {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usagef("--metadata %q: want key=value", kv)
				}
				meta[k] = v
			}
			for _, kv := range env {
				if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
					return usagef("--env %q: want NAME=value", kv)
				}
			}
			ctx := cmd.Context()
			c, err := a.jobClient(ctx, f)
			if err != nil {
				return err
			}
			up, err := c.EnsureBinary(ctx, args[0], a.progress("uploading "+args[0]))
			if err != nil {
				return err
			}
			if up.Uploaded {
				fmt.Fprintf(a.stderr, "Uploaded %s (%s, sha256 %s) to %s\n", args[0], humanize.IBytes(uint64(up.Size)), up.SHA256[:12], c.URL())
			} else {
				fmt.Fprintf(a.stderr, "The head has %s already (sha256 %s): nothing uploaded\n", args[0], up.SHA256[:12])
			}
			var wdSum string
			if workingDir != "" {
				if wdSum, err = a.uploadWorkingDir(ctx, c, workingDir, excludes); err != nil {
					return err
				}
			}
			sid, err := c.Submit(ctx, jobs.SubmitRequest{BinarySHA256: up.SHA256, Args: args[1:], Env: env, Metadata: meta, SubmissionID: id, WorkingDirSHA256: wdSum})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "Job %s submitted\n", sid)
			if noWait {
				fmt.Fprintln(a.stdout, sid)
				fmt.Fprintf(a.stderr, "Follow it with: goray job logs --follow %s\n", sid)
				return nil
			}
			return a.followJob(ctx, c, sid)
		}),
	}
	f.register(cmd)
	cmd.Flags().SetInterspersed(false) // flags after BINARY are the job's
	cmd.Flags().StringArrayVar(&env, "env", nil, "NAME=value added to the driver's environment (repeatable)")
	cmd.Flags().StringArrayVar(&metadata, "metadata", nil, "key=value kept with the job (repeatable)")
	cmd.Flags().StringVar(&id, "submission-id", "", "the job's submission id (default: generated); must be new")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "print the submission id and return at once")
	cmd.Flags().BoolVar(&wait, "wait", false, "print the job's output until it finishes and exit with its status (the default)")
	cmd.Flags().StringVar(&workingDir, "working-dir", "", "a directory to ship: the driver starts in its copy on the head, every worker in a copy on its node (Ray's runtime_env working_dir)")
	cmd.Flags().StringArrayVar(&excludes, "exclude", nil, "leave out of --working-dir what matches this pattern (path.Match, against the relative path or the base name; repeatable)")
	return cmd
}

// uploadWorkingDir packs dir (less excludes) and uploads the archive
// unless the head has it: its sha256.
func (a *app) uploadWorkingDir(ctx context.Context, c *jobclient.Client, dir string, excludes []string) (string, error) {
	path, p, err := workdir.PackFile(dir, excludes, workdir.Limits{}, "")
	if err != nil {
		return "", err
	}
	defer os.Remove(path)
	up, err := c.EnsureBinary(ctx, path, a.progress("uploading working dir "+dir))
	if err != nil {
		return "", fmt.Errorf("uploading working dir %s: %w", dir, err)
	}
	if up.Uploaded {
		fmt.Fprintf(a.stderr, "Uploaded working dir %s (%d files, %s packed, sha256 %s)\n", dir, p.Files, humanize.IBytes(uint64(up.Size)), up.SHA256[:12])
	} else {
		fmt.Fprintf(a.stderr, "The head has working dir %s already (sha256 %s): nothing uploaded\n", dir, up.SHA256[:12])
	}
	return up.SHA256, nil
}

// followJob prints the job's log until it finished and returns an error
// (exit 1) unless it SUCCEEDED. An interrupt leaves the job running.
func (a *app) followJob(ctx context.Context, c *jobclient.Client, id string) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := c.Logs(ctx, id, true, a.stdout)
	if ctx.Err() != nil {
		fmt.Fprintf(a.stderr, "\nStopped following job %s; it goes on (goray job logs --follow %s, goray job stop %s)\n", id, id, id)
		return &silentError{code: exitError}
	}
	if err != nil {
		return err
	}
	j, err := a.waitJob(ctx, c, id)
	if err != nil {
		return err
	}
	return a.jobOutcome(j)
}

// waitJob polls the job until it finished (a log stream that ended early,
// the head restarting).
func (a *app) waitJob(ctx context.Context, c *jobclient.Client, id string) (jobs.Job, error) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		j, err := c.Get(ctx, id)
		if err != nil || j.Status.Terminal() {
			return j, err
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-tick.C:
		}
	}
}

// jobOutcome says how the job ended on stderr: nil when it SUCCEEDED, a
// silent exit 1 otherwise.
func (a *app) jobOutcome(j jobs.Job) error {
	fmt.Fprintf(a.stderr, "Job %s %s: the driver %s\n", j.SubmissionID, j.Status, j.Message)
	if j.Status == jobs.StatusSucceeded {
		return nil
	}
	return &silentError{code: exitError}
}

func (a *app) jobStatusCmd() *cobra.Command {
	var f jobFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status SUBMISSION_ID",
		Short: "Show a job's status",
		Args:  cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := a.jobClient(cmd.Context(), f)
			if err != nil {
				return err
			}
			j, err := c.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, j)
			}
			t := newTable(a.stdout)
			t.row("submission id:", j.SubmissionID)
			t.row("status:", string(j.Status))
			t.row("message:", orDash(j.Message))
			t.row("goray job:", orDash(j.GorayJobID))
			t.row("entrypoint:", entrypoint(j))
			t.row("driver pid:", pidString(j.DriverPid))
			t.row("submitted:", j.SubmitTime.Local().Format(time.DateTime))
			t.row("started:", timeString(j.StartTime))
			t.row("ended:", timeString(j.EndTime))
			t.row("log file:", orDash(j.LogFile))
			for k, v := range j.Metadata {
				t.row("metadata "+k+":", v)
			}
			return t.flush()
		}),
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job as JSON")
	return cmd
}

func (a *app) jobLogsCmd() *cobra.Command {
	var f jobFlags
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs SUBMISSION_ID [--follow]",
		Short: "Print a job's output (its driver's stdout and stderr)",
		Args:  cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			c, err := a.jobClient(ctx, f)
			if err != nil {
				return err
			}
			err = c.Logs(ctx, args[0], follow, a.stdout)
			if ctx.Err() != nil {
				return nil // interrupted while following
			}
			return err
		}),
	}
	f.register(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "go on printing until the job finishes")
	return cmd
}

func (a *app) jobStopCmd() *cobra.Command {
	var f jobFlags
	var wait bool
	cmd := &cobra.Command{
		Use:   "stop SUBMISSION_ID [--wait]",
		Short: "Stop a job: SIGTERM to its driver, SIGKILL after a grace period; its workers end with it",
		Args:  cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.jobClient(ctx, f)
			if err != nil {
				return err
			}
			stopped, err := c.Stop(ctx, args[0])
			if err != nil {
				return err
			}
			if !stopped {
				j, err := c.Get(ctx, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "Job %s had finished already: %s\n", args[0], j.Status)
				return nil
			}
			if !wait {
				fmt.Fprintf(a.stdout, "Asked job %s to stop\n", args[0])
				return nil
			}
			j, err := a.waitJob(ctx, c, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Job %s %s: %s\n", j.SubmissionID, j.Status, j.Message)
			return nil
		}),
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&wait, "wait", false, "return once the job has stopped")
	return cmd
}

func (a *app) jobListCmd() *cobra.Command {
	var f jobFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the jobs the head keeps",
		Args:  cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := a.jobClient(cmd.Context(), f)
			if err != nil {
				return err
			}
			js, err := c.List(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, jobs.ListResponse{Jobs: js})
			}
			t := newTable(a.stdout, "SUBMISSION ID", "STATUS", "GORAY JOB", "SUBMITTED", "ENDED", "ENTRYPOINT", "MESSAGE")
			for _, j := range js {
				t.row(j.SubmissionID, string(j.Status), shortHex(j.GorayJobID), j.SubmitTime.Local().Format(time.DateTime),
					timeString(j.EndTime), entrypoint(j), orDash(j.Message))
			}
			return t.flush()
		}),
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"jobs": [...]} as JSON`)
	return cmd
}

func (a *app) jobDeleteCmd() *cobra.Command {
	var f jobFlags
	cmd := &cobra.Command{
		Use:   "delete SUBMISSION_ID",
		Short: "Delete a finished job: its record, log and working directory on the head",
		Args:  cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := a.jobClient(cmd.Context(), f)
			if err != nil {
				return err
			}
			if err := c.Delete(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Deleted job %s\n", args[0])
			return nil
		}),
	}
	f.register(cmd)
	return cmd
}

// entrypoint shows a job's binary and arguments.
func entrypoint(j jobs.Job) string {
	s := "sha256:" + j.BinarySHA256[:min(12, len(j.BinarySHA256))]
	if len(j.Args) > 0 {
		s += " " + strings.Join(j.Args, " ")
	}
	return s
}

func timeString(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

func pidString(pid int) string {
	if pid == 0 {
		return "-"
	}
	return fmt.Sprint(pid)
}
