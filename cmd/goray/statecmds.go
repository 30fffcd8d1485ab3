package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/goray-dev/goray/state"
	"github.com/spf13/cobra"
)

// summaryKinds are the things `goray summary` counts.
var summaryKinds = []string{"tasks", "actors", "objects"}

// summary gathers and counts one kind.
func (a *app) summary(ctx context.Context, c cluster, kind string) (state.Summary, error) {
	gctx, cancel := context.WithTimeout(ctx, gcsTimeout)
	defer cancel()
	switch kind {
	case "tasks":
		tp, err := state.Tasks(gctx, c, nil, 0)
		if err != nil {
			return state.Summary{}, err
		}
		return state.SummarizeTasks(tp.Rows), nil
	case "actors":
		as, err := c.Actors(gctx)
		if err != nil {
			return state.Summary{}, err
		}
		in := []state.ActorSummaryInput{}
		for _, r := range actorRows(as) {
			in = append(in, state.ActorSummaryInput{Class: r.ClassName, State: r.State})
		}
		return state.SummarizeActors(in), nil
	case "objects":
		d, err := state.GatherNodes(ctx, c, true, func(msg string) { fmt.Fprintln(a.stderr, "warning: "+msg) })
		if err != nil {
			return state.Summary{}, err
		}
		return state.SummarizeObjects(state.ObjectRows(d)), nil
	}
	return state.Summary{}, usagef("cannot summarize %q: use one of %s", kind, strings.Join(summaryKinds, ", "))
}

// writeSummary writes one row per function, class or call site with a
// column per state.
func writeSummary(w io.Writer, kind string, s state.Summary) error {
	keys := s.StateKeys()
	first := map[string]string{"tasks": "FUNCTION", "actors": "CLASS", "objects": "CALL SITE"}[kind]
	header := []string{first}
	if kind == "tasks" {
		header = append(header, "KIND")
	}
	header = append(header, "TOTAL")
	for _, k := range keys {
		header = append(header, strings.ToUpper(k))
	}
	if kind == "objects" {
		header = append(header, "SIZE")
	}
	t := newTable(w, header...)
	for _, r := range s.Rows {
		row := []string{r.Key}
		if kind == "tasks" {
			row = append(row, r.Kind)
		}
		row = append(row, strconv.FormatInt(r.Total, 10))
		for _, k := range keys {
			row = append(row, strconv.FormatInt(r.States[k], 10))
		}
		if kind == "objects" {
			row = append(row, humanize.IBytes(uint64(r.Bytes)))
		}
		t.row(row...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "total: %d %s\n", s.Total, kind)
	return err
}

func (a *app) summaryCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "summary tasks|actors|objects",
		Short: "Count the cluster's tasks, actors or objects by function, class or call site and state",
		Args:  cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return usagef("say what to summarize: %s", strings.Join(summaryKinds, ", "))
		}),
	}
	for _, kind := range summaryKinds {
		var f clusterFlags
		sub := &cobra.Command{
			Use:   kind,
			Short: "Summarize " + kind,
			Args:  cobra.NoArgs,
			RunE: runE(func(cmd *cobra.Command, args []string) error {
				c, err := a.connect(&f)
				if err != nil {
					return err
				}
				defer c.Close()
				s, err := a.summary(cmd.Context(), c, kind)
				if err != nil {
					return err
				}
				if f.asJSON {
					return writeJSON(a.stdout, s)
				}
				return writeSummary(a.stdout, kind, s)
			}),
		}
		f.register(sub)
		cmd.AddCommand(sub)
	}
	return cmd
}

// memoryReport is the JSON of `goray memory`.
type memoryReport struct {
	GroupBy    string              `json:"group_by"`
	Groups     []state.MemoryGroup `json:"groups"`
	Objects    int                 `json:"objects"`
	TotalBytes int64               `json:"total_bytes"`
}

func (a *app) memory(ctx context.Context, c cluster, groupBy, sortBy string) (memoryReport, error) {
	d, err := state.GatherNodes(ctx, c, true, func(msg string) { fmt.Fprintln(a.stderr, "warning: "+msg) })
	if err != nil {
		return memoryReport{}, err
	}
	objs := state.ObjectRows(d)
	groups, err := state.GroupMemory(state.MemoryRows(objs), groupBy, sortBy)
	if err != nil {
		return memoryReport{}, usagef("%v", err)
	}
	r := memoryReport{GroupBy: groupBy, Groups: groups, Objects: len(objs)}
	for _, o := range objs {
		r.TotalBytes += max(o.Size, 0)
	}
	return r, nil
}

func writeMemory(w io.Writer, r memoryReport) error {
	for _, g := range r.Groups {
		fmt.Fprintf(w, "--- %s %s: %d objects, %s ---\n", r.GroupBy, g.Key, g.Objects, humanize.IBytes(uint64(max(g.TotalBytes, 0))))
		t := newTable(w, "OBJECT ID", "OWNER", "CALL SITE", "SIZE", "WHERE", "REASON", "COUNT")
		for _, m := range g.Rows {
			where := m.Where
			if m.Node != "" && m.Where != state.WhereSpilled {
				where += " on " + shortHex(m.Node)
			}
			t.row(m.ObjectID, ownerCell(m.OwnerWorkerID, m.OwnerNodeID), m.CallSite, humanize.IBytes(uint64(max(m.Size, 0))), where, m.Reason, strconv.FormatInt(m.Count, 10))
		}
		if err := t.flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	_, err := fmt.Fprintf(w, "total: %d objects, %s\n", r.Objects, humanize.IBytes(uint64(max(r.TotalBytes, 0))))
	return err
}

func (a *app) memoryCmd() *cobra.Command {
	var f clusterFlags
	var groupBy, sortBy string
	cmd := &cobra.Command{
		Use:   "memory",
		Short: "Show every object reference: owner, call site, size, where it lives and why it is pinned, grouped and totalled",
		Args:  cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(state.MemoryGroupBy, groupBy) || !slices.Contains(state.MemorySortBy, sortBy) {
				_, err := state.GroupMemory(nil, groupBy, sortBy)
				return usagef("%v", err)
			}
			c, err := a.connect(&f)
			if err != nil {
				return err
			}
			defer c.Close()
			r, err := a.memory(cmd.Context(), c, groupBy, sortBy)
			if err != nil {
				return err
			}
			if f.asJSON {
				return writeJSON(a.stdout, r)
			}
			return writeMemory(a.stdout, r)
		}),
	}
	f.register(cmd)
	cmd.Flags().StringVar(&groupBy, "group-by", "node", "group references by node or owner")
	cmd.Flags().StringVar(&sortBy, "sort-by", "size", "sort each group by size, object_id or reason")
	return cmd
}

func (a *app) timelineCmd() *cobra.Command {
	var f clusterFlags
	var job, out string
	cmd := &cobra.Command{
		Use:   "timeline",
		Short: "Write the tasks' scheduling, argument fetch and execution as a Chrome trace (open it in Perfetto)",
		Args:  cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usagef("say where to write the trace: -o trace.json (or -o - for stdout)")
			}
			c, err := a.connect(&f)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), gcsTimeout)
			defer cancel()
			var fs []state.Filter
			if job != "" {
				fs = append(fs, state.Filter{Key: "job_id", Value: job})
			}
			tp, err := state.Tasks(ctx, c, fs, 0)
			if err != nil {
				return err
			}
			views, err := c.Nodes(ctx)
			if err != nil {
				return err
			}
			names := map[string]string{}
			for _, v := range views {
				names[hexID(v.GetInfo().GetNodeId())] = v.GetInfo().GetNodeName()
			}
			trace := state.Timeline(tp.Rows, names)
			if out == "-" {
				return state.WriteTrace(a.stdout, trace)
			}
			fh, err := os.Create(out)
			if err != nil {
				return err
			}
			if err := state.WriteTrace(fh, trace); err != nil {
				fh.Close()
				return err
			}
			if err := fh.Close(); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote %d tasks (%d trace events) to %s; open it at https://ui.perfetto.dev or chrome://tracing\n", len(tp.Rows), len(trace.TraceEvents), out)
			return nil
		}),
	}
	f.register(cmd)
	cmd.Flags().StringVar(&job, "job", "", "only this job's tasks (its hex id, as `goray list jobs` shows it)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "file to write the trace to (- for stdout)")
	return cmd
}
