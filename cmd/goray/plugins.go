package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/internal/auth"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/goray-dev/goray/state"
	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
)

func (a *app) pluginsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plugins list|check|install",
		Short: "List the nodes' plugins, check a plugin binary, or install one",
		Args:  cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return usagef("say what to do: list, check PATH or install SOURCE")
		}),
	}
	var f clusterFlags
	list := &cobra.Command{
		Use:   "list",
		Short: "List the plugins of every alive node of the cluster (name, kind, version, state, restarts)",
		Args:  cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(&f)
			if err != nil {
				return err
			}
			defer c.Close()
			rows, err := pluginRows(cmd.Context(), c, func(msg string) { fmt.Fprintln(a.stderr, "warning:", msg) })
			if err != nil {
				return err
			}
			if f.asJSON {
				return writeJSON(a.stdout, map[string]any{"plugins": rows})
			}
			return writePlugins(a.stdout, rows)
		}),
	}
	f.register(list)
	var kind string
	var asJSON bool
	check := &cobra.Command{
		Use:   "check PATH",
		Short: "Check a plugin binary: handshake, info, config schema, health, and a quick conformance run",
		Args:  cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			return a.checkPlugin(ctx, args[0], kind, asJSON)
		}),
	}
	check.Flags().StringVar(&kind, "kind", "", "expected kind ("+strings.Join(plugin.Kinds, ", ")+"); default: whatever the plugin says")
	check.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(list, check, a.pluginsInstallCmd())
	return cmd
}

// pluginRow is one plugin of one node.
type pluginRow struct {
	Node       string `json:"node_id"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Version    string `json:"version"`
	State      string `json:"state"`
	Restarts   int32  `json:"restarts"`
	Pid        int32  `json:"pid"`
	APIVersion int32  `json:"api_version"`
	Path       string `json:"path"`
	LastError  string `json:"last_error,omitempty"`
	// Pinned says whether the plugin block pins the binary's sha256 (the
	// way to trust a plugin binary: it is checked before every start).
	Pinned bool   `json:"pinned"`
	SHA256 string `json:"sha256,omitempty"`
}

// pluginRows lists the plugins of every alive node, asked of each node's
// raylet at its TCP address.
func pluginRows(ctx context.Context, c cluster, warn func(string)) ([]pluginRow, error) {
	d, err := state.GatherNodes(ctx, c, false, warn)
	if err != nil {
		return nil, err
	}
	rows := []pluginRow{}
	for _, n := range d.Nodes {
		st := d.Stats[hexID(n.GetNodeId())]
		for _, p := range st.GetPlugins() {
			rows = append(rows, pluginRowOf(n.GetNodeId(), p))
		}
	}
	return rows, nil
}

func pluginRowOf(node []byte, p *pb.PluginStatus) pluginRow {
	return pluginRow{Node: hexID(node), Kind: p.Kind, Name: p.Name, Version: p.Version, State: p.State,
		Restarts: p.Restarts, Pid: p.Pid, APIVersion: p.ApiVersion, Path: p.Path, LastError: p.LastError,
		Pinned: p.Sha256 != "", SHA256: p.Sha256}
}

func writePlugins(w io.Writer, rows []pluginRow) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "No plugins.")
		return err
	}
	t := newTable(w, "NODE", "KIND", "NAME", "VERSION", "STATE", "RESTARTS", "PID", "API", "PINNED", "LAST ERROR")
	for _, r := range rows {
		pinned := "no"
		if r.Pinned {
			pinned = "sha256:" + r.SHA256[:min(12, len(r.SHA256))]
		}
		t.row(shortHex(r.Node), r.Kind, r.Name, orDash(r.Version), r.State, fmt.Sprint(r.Restarts), pidCell(r.Pid), fmt.Sprint(r.APIVersion), pinned, orDash(r.LastError))
	}
	return t.flush()
}

// startCheckHost runs the plugin of the config file at cfgPath under a
// real plugin host.
func startCheckHost(ctx context.Context, cfgPath, sockDir string, log hclog.Logger) (*host.Manager, error) {
	n, diags := config.Load(cfgPath)
	if err := config.NewDiagnosticsError(diags, n.Files()); err != nil {
		return nil, err
	}
	// The checked plugins authenticate their data connections to each
	// other with a token of the check's own, as an embedded node's do:
	// never the cluster's, which this machine may not have yet.
	creds, err := auth.New(auth.GenerateToken(), nil)
	if err != nil {
		return nil, err
	}
	m := host.New(host.Options{PluginDir: n.PluginDir, Blocks: n.Plugins, Files: n.Files(), Logger: log, SocketDir: sockDir,
		Env:       creds.Env(),
		Supported: map[string][]int{plugin.KindTransport: {transport.APIVersion}}})
	if diags := m.Start(ctx); diags.HasErrors() {
		_ = m.Stop(context.Background())
		return nil, config.NewDiagnosticsError(diags, n.Files())
	}
	return m, nil
}

// checkReport is what `goray plugins check` prints.
type checkReport struct {
	*host.CheckReport
	Conformance string `json:"conformance"`
}

func (a *app) checkPlugin(ctx context.Context, path, kind string, asJSON bool) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	rep, err := host.Check(ctx, abs, kind)
	if err != nil {
		return err
	}
	out := checkReport{CheckReport: rep, Conformance: "not available for this kind yet"}
	var confErr error
	if rep.Kind == plugin.KindTransport {
		confErr = quickTransportCheck(ctx, abs, rep.Name, a.log)
		out.Conformance = "passed"
		if confErr != nil {
			out.Conformance = "failed: " + confErr.Error()
		}
	}
	if asJSON {
		if err := writeJSON(a.stdout, out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "plugin:       %s\n", abs)
		fmt.Fprintf(a.stdout, "kind/name:    %s/%s (version %s)\n", rep.Kind, rep.Name, orDash(rep.Version))
		fmt.Fprintf(a.stdout, "API versions: %v\n", rep.APIVersions)
		fmt.Fprintf(a.stdout, "healthy:      %v %s\n", rep.Healthy, rep.HealthError)
		fmt.Fprintf(a.stdout, "config:       %d attribute(s), %d block(s)\n", len(rep.Schema.Attributes), len(rep.Schema.Blocks))
		fmt.Fprintf(a.stdout, "conformance:  %s\n", out.Conformance)
	}
	return confErr
}

// quickTransportCheck starts the plugin under a real host and moves one
// small tensor through it, one-sided or two-sided as the plugin says.
func quickTransportCheck(ctx context.Context, path, name string, log hclog.Logger) error {
	dir, err := os.MkdirTemp("", "grchk")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfgPath := filepath.Join(dir, "check.hcl")
	bin := filepath.Base(path)
	block := fmt.Sprintf("plugin_dir = %q\nplugin \"transport\" %q {}\n", filepath.Dir(path), strings.TrimPrefix(bin, "goray-transport-"))
	if err := os.WriteFile(cfgPath, []byte(block), 0o644); err != nil {
		return err
	}
	m, err := startCheckHost(ctx, cfgPath, dir, log)
	if err != nil {
		return err
	}
	defer m.Stop(context.Background())
	conn, ver, err := m.Client(plugin.KindTransport, strings.TrimPrefix(bin, "goray-transport-"))
	if err != nil {
		return err
	}
	tr := transport.NewClient(conn, ver)
	info, err := tr.Info(ctx, &transport.InfoRequest{})
	if err != nil {
		return fmt.Errorf("info: %w", err)
	}
	src, err := transport.NewTensorIn(shmem.Prefix+"chk-", transport.Float32, 4, 8)
	if err != nil {
		return err
	}
	defer src.Free()
	data, err := src.Bytes(ctx)
	if err != nil {
		return err
	}
	for i := range data {
		data[i] = byte(i)
	}
	oid := fmt.Sprintf("%040x", time.Now().UnixNano())
	md, err := tr.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: oid, Tensors: []transport.Tensor{src}})
	if err != nil {
		return fmt.Errorf("extract metadata: %w", err)
	}
	gcDone := false
	defer func() {
		if !gcDone { // leave nothing behind when a later step fails
			gctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = tr.GarbageCollect(gctx, &transport.GarbageCollectRequest{ObjectID: oid, TransportData: md.TransportData})
		}
	}()
	sendCtx, stopSend := context.WithCancel(ctx)
	defer stopSend()
	recvReq := &transport.ReceiveRequest{ObjectID: oid, Tensors: md.Tensors, TransportData: md.TransportData}
	if info.TwoSided() {
		cm, err := tr.CommunicatorMetadata(ctx, &transport.CommunicatorMetadataRequest{ObjectID: oid})
		if err != nil {
			return fmt.Errorf("communicator metadata: %w", err)
		}
		recvReq.CommunicatorData = cm.Data
		errc := make(chan error, 1)
		go func() {
			_, err := tr.Send(sendCtx, &transport.SendRequest{ObjectID: oid, Tensors: md.Tensors, TransportData: md.TransportData, CommunicatorData: cm.Data})
			errc <- err
		}()
		defer func() { <-errc }()
	}
	got, err := tr.Receive(ctx, recvReq)
	if err != nil {
		stopSend()
		return fmt.Errorf("receive: %w", err)
	}
	if len(got.Tensors) != 1 {
		return fmt.Errorf("receive returned %d tensors, want 1", len(got.Tensors))
	}
	gb, err := got.Tensors[0].Bytes(ctx)
	if err != nil {
		return err
	}
	for i := range data {
		if gb[i] != data[i] {
			return errors.New("received bytes differ from the sent ones")
		}
	}
	for _, s := range got.Allocated {
		_ = shmem.Unlink(s)
	}
	gcDone = true
	if _, err := tr.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: oid, TransportData: md.TransportData}); err != nil {
		return fmt.Errorf("garbage collect: %w", err)
	}
	return nil
}
