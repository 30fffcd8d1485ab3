package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/host"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
)

// logsFlags are the flags of `goray logs`.
type logsFlags struct {
	clusterFlags
	node   string
	worker string
	actor  string
	pid    int
	plugin string
	tail   int64
	follow bool
	stderr bool
}

// logNode is an alive node and its raylet, for `goray logs`.
type logNode struct {
	info *pb.NodeInfo
	ip   string
	logs pb.LogFilesClient
	// list is the node's ListLogs answer (nil until asked).
	list *pb.ListLogsReply
}

func (n *logNode) short() string { return shortID(n.info.GetNodeId()) }

// logFileRow is one row of the listing.
type logFileRow struct {
	NodeID   string `json:"node_id"`
	NodeName string `json:"node_name"`
	IP       string `json:"ip"`
	Head     bool   `json:"is_head"`
	File     string `json:"file"`
	Size     int64  `json:"size"`
	MtimeMs  int64  `json:"mtime_ms"`
}

func (a *app) logsCmd() *cobra.Command {
	var f logsFlags
	cmd := &cobra.Command{
		Use:   "logs [FILE]",
		Short: "List the log files of every node, or print (and follow) one",
		Long: "Without FILE or selector, list the log files of every alive node of the cluster (through each node's raylet):\n" +
			"node.log (the node host: raylet, object store, plugins), gcs.log (the head's GCS), plugin-<kind>-<name>.log (a plugin's own output)\n" +
			"and worker-<id>.out|.err|.log.\n" +
			"With FILE, print that file of the node --node names (default: the head, else the one node that has it).\n" +
			"--worker, --actor and --pid pick a worker's stdout file (its stderr with --err) instead of FILE; --plugin KIND/NAME a plugin's log.\n" +
			"--tail N prints the last N lines; --follow then prints what is appended until Ctrl-C. See docs/logs.md.",
		Args: cobra.MaximumNArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			file := ""
			if len(args) == 1 {
				file = args[0]
			}
			selectors := 0
			for _, set := range []bool{file != "", f.worker != "", f.actor != "", f.pid != 0, f.plugin != ""} {
				if set {
					selectors++
				}
			}
			switch {
			case selectors > 1:
				return usagef("give one of FILE, --worker, --actor, --pid and --plugin")
			case f.tail < 0:
				return usagef("--tail %d: want a number of lines >= 0", f.tail)
			case selectors == 0 && (f.follow || f.tail > 0 || f.stderr):
				return usagef("--follow, --tail and --err need a FILE, --worker, --actor, --pid or --plugin")
			case f.pid < 0:
				return usagef("--pid %d: want a process id", f.pid)
			case f.stderr && (file != "" || f.plugin != ""):
				return usagef("--err goes with --worker, --actor or --pid")
			}
			if f.plugin != "" {
				kind, name, ok := strings.Cut(f.plugin, "/")
				if !ok || kind == "" || name == "" || strings.ContainsAny(name, "/\\") {
					return usagef("--plugin %q: want KIND/NAME, as in its block plugin \"KIND\" \"NAME\" (goray plugins list shows them)", f.plugin)
				}
				file = host.LogFileName(kind, name)
			}
			c, err := a.connect(&f.clusterFlags)
			if err != nil {
				return err
			}
			defer c.Close()
			nodes, err := a.logNodes(ctx, c)
			if err != nil {
				return err
			}
			if selectors == 0 {
				return a.listLogs(ctx, nodes, f)
			}
			n, name, err := a.pickLog(ctx, c, nodes, file, f)
			if err != nil {
				return err
			}
			return a.readLog(ctx, n, name, f)
		}),
	}
	f.register(cmd)
	cmd.Flags().StringVar(&f.node, "node", "", "the node: its id (or a prefix of it) or its name")
	cmd.Flags().StringVar(&f.worker, "worker", "", "print the log of the worker with this id (or a prefix of it)")
	cmd.Flags().StringVar(&f.actor, "actor", "", "print the log of the actor with this id (or a prefix of it) or name")
	cmd.Flags().IntVar(&f.pid, "pid", 0, "print the log of the live worker with this process id")
	cmd.Flags().StringVar(&f.plugin, "plugin", "", "print the log of the plugin KIND/NAME (e.g. storage/s3)")
	cmd.Flags().Int64Var(&f.tail, "tail", 0, "print only the last N lines")
	cmd.Flags().BoolVarP(&f.follow, "follow", "f", false, "keep printing what is appended, until Ctrl-C")
	cmd.Flags().BoolVar(&f.stderr, "err", false, "with --worker, --actor or --pid: the worker's stderr (.err) instead of its stdout (.out)")
	return cmd
}

// logNodes returns the alive nodes, head first, with a client for each
// raylet.
func (a *app) logNodes(ctx context.Context, c *grpcCluster) ([]*logNode, error) {
	gctx, cancel := context.WithTimeout(ctx, gcsTimeout)
	defer cancel()
	views, err := c.Nodes(gctx)
	if err != nil {
		return nil, err
	}
	var out []*logNode
	for _, v := range views {
		info := v.GetInfo()
		if info.GetState() != "ALIVE" || info.GetRayletTcp() == "" {
			continue
		}
		cc, err := rpc.Dial(info.GetRayletTcp(), c.creds)
		if err != nil {
			return nil, fmt.Errorf("connecting to the raylet of node %s at %s: %w", shortID(info.GetNodeId()), info.GetRayletTcp(), err)
		}
		go func() { <-ctx.Done(); cc.Close() }()
		ip, _, _ := net.SplitHostPort(info.GetRayletTcp())
		out = append(out, &logNode{info: info, ip: ip, logs: pb.NewLogFilesClient(cc)})
	}
	slices.SortStableFunc(out, func(x, y *logNode) int {
		switch {
		case x.info.GetIsHead() != y.info.GetIsHead():
			if x.info.GetIsHead() {
				return -1
			}
			return 1
		}
		return strings.Compare(x.short(), y.short())
	})
	if len(out) == 0 {
		return nil, errors.New("the cluster has no alive node")
	}
	return out, nil
}

// fetchList asks each node for its files (once); nodes that do not answer
// are reported on stderr and left out.
func (a *app) fetchList(ctx context.Context, nodes []*logNode) []*logNode {
	var ok []*logNode
	for _, n := range nodes {
		if n.list == nil {
			lctx, cancel := context.WithTimeout(ctx, fanoutTimeout)
			rep, err := n.logs.ListLogs(lctx, &pb.ListLogsRequest{})
			cancel()
			if err != nil {
				fmt.Fprintf(a.stderr, "warning: node %s (%s): listing its logs: %v\n", n.short(), n.info.GetRayletTcp(), status.Convert(err).Message())
				continue
			}
			n.list = rep
		}
		ok = append(ok, n)
	}
	return ok
}

// matchNode returns the nodes sel names: an id prefix or a name.
func matchNode(nodes []*logNode, sel string) ([]*logNode, error) {
	if sel == "" {
		return nodes, nil
	}
	var byID, byName []*logNode
	for _, n := range nodes {
		if strings.HasPrefix(hexID(n.info.GetNodeId()), strings.ToLower(sel)) {
			byID = append(byID, n)
		}
		if n.info.GetNodeName() == sel {
			byName = append(byName, n)
		}
	}
	found := byID
	if len(found) == 0 {
		found = byName
	}
	switch {
	case len(found) == 0:
		return nil, usagef("--node %s: no alive node has this id or name", sel)
	case len(found) > 1:
		var names []string
		for _, n := range found {
			names = append(names, n.short())
		}
		return nil, usagef("--node %s names %d nodes (%s); give more of the id", sel, len(found), strings.Join(names, ", "))
	}
	return found, nil
}

// listLogs prints the log files of the nodes --node selects.
func (a *app) listLogs(ctx context.Context, nodes []*logNode, f logsFlags) error {
	nodes, err := matchNode(nodes, f.node)
	if err != nil {
		return err
	}
	rows := []logFileRow{}
	for _, n := range a.fetchList(ctx, nodes) {
		for _, file := range n.list.GetFiles() {
			rows = append(rows, logFileRow{NodeID: hexID(n.info.GetNodeId()), NodeName: n.info.GetNodeName(), IP: n.ip, Head: n.info.GetIsHead(),
				File: file.GetName(), Size: file.GetSize(), MtimeMs: file.GetMtimeMs()})
		}
	}
	if f.asJSON {
		return writeJSON(a.stdout, map[string]any{"logs": rows})
	}
	t := newTable(a.stdout, "NODE", "NAME", "IP", "FILE", "SIZE", "MODIFIED")
	for _, r := range rows {
		name := orDash(r.NodeName)
		if r.Head {
			name += " (head)"
		}
		t.row(shortHex(r.NodeID), name, r.IP, r.File, humanize.IBytes(uint64(max(r.Size, 0))), formatTime(r.MtimeMs))
	}
	return t.flush()
}

// pickLog resolves what to print: the node and the file name.
func (a *app) pickLog(ctx context.Context, c *grpcCluster, nodes []*logNode, file string, f logsFlags) (*logNode, string, error) {
	ext := ".out"
	if f.stderr {
		ext = ".err"
	}
	cands, err := matchNode(nodes, f.node)
	if err != nil {
		return nil, "", err
	}
	switch {
	case f.actor != "":
		gctx, cancel := context.WithTimeout(ctx, gcsTimeout)
		defer cancel()
		actors, err := c.Actors(gctx)
		if err != nil {
			return nil, "", err
		}
		var found []*pb.ActorInfo
		for _, ac := range actors {
			if strings.HasPrefix(hexID(ac.GetActorId()), strings.ToLower(f.actor)) || ac.GetName() == f.actor {
				found = append(found, ac)
			}
		}
		switch {
		case len(found) == 0:
			return nil, "", fmt.Errorf("no actor has the id or name %q (goray list actors)", f.actor)
		case len(found) > 1:
			return nil, "", usagef("--actor %s names %d actors; give more of the id", f.actor, len(found))
		}
		addr := found[0].GetAddress()
		if len(addr.GetWorkerId()) == 0 {
			return nil, "", fmt.Errorf("actor %s has no worker (state %s)", shortID(found[0].GetActorId()), found[0].GetState())
		}
		for _, n := range cands {
			if string(n.info.GetNodeId()) == string(addr.GetNodeId()) {
				return n, "worker-" + hexID(addr.GetWorkerId()) + ext, nil
			}
		}
		return nil, "", fmt.Errorf("actor %s ran on node %s, which is not alive (or not --node)", shortID(found[0].GetActorId()), shortID(addr.GetNodeId()))
	case f.pid != 0:
		var hits []*logNode
		var worker []byte
		for _, n := range a.fetchList(ctx, cands) {
			for _, w := range n.list.GetWorkers() {
				if int(w.GetPid()) == f.pid {
					hits, worker = append(hits, n), w.GetWorkerId()
				}
			}
		}
		switch {
		case len(hits) == 0:
			return nil, "", fmt.Errorf("no live worker has pid %d on %s", f.pid, nodesText(cands))
		case len(hits) > 1:
			return nil, "", usagef("pid %d is a worker on several nodes; choose one with --node", f.pid)
		}
		return hits[0], "worker-" + hexID(worker) + ext, nil
	case f.worker != "":
		prefix := "worker-" + strings.ToLower(f.worker)
		type hit struct {
			n    *logNode
			name string
		}
		var hits []hit
		for _, n := range a.fetchList(ctx, cands) {
			for _, file := range n.list.GetFiles() {
				if strings.HasPrefix(file.GetName(), prefix) && strings.HasSuffix(file.GetName(), ext) {
					hits = append(hits, hit{n, file.GetName()})
				}
			}
		}
		switch {
		case len(hits) == 0:
			return nil, "", fmt.Errorf("no worker %s log with id %s on %s", ext, f.worker, nodesText(cands))
		case len(hits) > 1:
			return nil, "", usagef("--worker %s names %d workers; give more of the id", f.worker, len(hits))
		}
		return hits[0].n, hits[0].name, nil
	}
	// A file: on the node --node names, else the head, else the one node
	// that has it.
	if f.node != "" {
		return cands[0], file, nil
	}
	var has []*logNode
	for _, n := range a.fetchList(ctx, cands) {
		if slices.ContainsFunc(n.list.GetFiles(), func(x *pb.LogFileInfo) bool { return x.GetName() == file }) {
			has = append(has, n)
		}
	}
	switch {
	case len(has) == 0:
		return nil, "", fmt.Errorf("no alive node has a log file %q (goray logs lists them)", file)
	case len(has) > 1 && has[0].info.GetIsHead():
		return has[0], file, nil
	case len(has) > 1:
		return nil, "", usagef("%s is on %d nodes; choose one with --node", file, len(has))
	}
	return has[0], file, nil
}

func nodesText(ns []*logNode) string {
	if len(ns) == 1 {
		return "node " + ns[0].short()
	}
	return strconv.Itoa(len(ns)) + " alive nodes"
}

// readLog prints the file (its tail, then what is appended with
// --follow) until it ends, the node goes away or ctx ends.
func (a *app) readLog(ctx context.Context, n *logNode, name string, f logsFlags) error {
	st, err := n.logs.ReadLog(ctx, &pb.ReadLogRequest{Name: name, TailLines: f.tail, Follow: f.follow})
	if err != nil {
		return fmt.Errorf("reading %s on node %s: %w", name, n.short(), err)
	}
	for {
		chunk, err := st.Recv()
		switch {
		case err == nil:
			if _, err := a.stdout.Write(chunk.GetData()); err != nil {
				return err
			}
			continue
		case errors.Is(err, io.EOF):
			return nil
		case ctx.Err() != nil:
			return nil // Ctrl-C
		}
		s := status.Convert(err)
		switch s.Code() {
		case codes.Unavailable:
			fmt.Fprintf(a.stderr, "goray logs: node %s went away: %s\n", n.short(), s.Message())
			return nil
		case codes.NotFound, codes.InvalidArgument:
			return fmt.Errorf("node %s: %s", n.short(), s.Message())
		}
		return fmt.Errorf("reading %s on node %s: %w", name, n.short(), err)
	}
}
