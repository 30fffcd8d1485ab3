package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/goray-dev/goray/host/node"
	"github.com/goray-dev/goray/internal/auth"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/state"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// gcsTimeout bounds the GCS queries of status and list.
const gcsTimeout = 10 * time.Second

// fanoutTimeout bounds each raylet and core worker query of list.
const fanoutTimeout = 5 * time.Second

// session is one session_* directory under a temp dir.
type session struct {
	Dir string
	// Info is the node.json of the session; nil when there is none.
	Info *node.Info
	// Running says the node process recorded in Info still runs.
	Running bool
}

// sessions lists the session directories under root, oldest first (their
// names start with the start time). A missing root has no sessions.
func (p procFS) sessions(root string) ([]session, error) {
	matches, err := filepath.Glob(filepath.Join(root, "session_*"))
	if err != nil {
		return nil, err
	}
	slices.Sort(matches)
	var out []session
	for _, dir := range matches {
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() { // session_latest is a symlink
			continue
		}
		s := session{Dir: dir}
		st, err := os.Stat(filepath.Join(dir, "node.json"))
		if err == nil {
			if info, err := node.ReadInfo(dir); err == nil {
				s.Info = &info
				s.Running = p.startedBy(info.Pid, st.ModTime())
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// ErrNoCluster says no address was given and no head runs under the temp
// dir.
var ErrNoCluster = errors.New("no running goray cluster found")

// findHead returns the running head node under root: the one
// session_latest points at when it runs, else the newest running head, else
// the newest running node that joined a cluster (its node.json names the
// cluster's GCS), so that status and list work on every node.
func (p procFS) findHead(root string) (*node.Info, error) {
	ss, err := p.sessions(root)
	if err != nil {
		return nil, err
	}
	latest, _ := filepath.EvalSymlinks(filepath.Join(root, "session_latest"))
	var newest, member *node.Info
	for _, s := range ss {
		if s.Running && !s.Info.Head {
			member = s.Info
		}
		if !s.Running || !s.Info.Head {
			continue
		}
		if resolved, _ := filepath.EvalSymlinks(s.Dir); latest != "" && resolved == latest {
			return s.Info, nil
		}
		newest = s.Info
	}
	if newest == nil && member != nil {
		return member, nil
	}
	if newest == nil {
		return nil, fmt.Errorf("%w: no --address, $%s is not set and no head node runs under %s (start one with `goray start --head`)", ErrNoCluster, envAddress, root)
	}
	return newest, nil
}

// resolveAddress picks the GCS address: the flag, else $GORAY_ADDRESS,
// else the running head under tempDir.
func (a *app) resolveAddress(flag, tempDir string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if env := strings.TrimSpace(a.getenv(envAddress)); env != "" {
		return env, nil
	}
	info, err := procFS{a.procRoot}.findHead(tempDir)
	if err != nil {
		return "", err
	}
	return info.GCSAddress, nil
}

// cluster is what status and list ask of a running cluster.
type cluster interface {
	Nodes(ctx context.Context) ([]*pb.NodeView, error)
	Jobs(ctx context.Context) ([]*pb.JobInfo, error)
	Actors(ctx context.Context) ([]*pb.ActorInfo, error)
	PlacementGroups(ctx context.Context) ([]*pb.PlacementGroupInfo, error)
	// ClusterInfo describes the GCS: storage, health, uptime.
	ClusterInfo(ctx context.Context) (*pb.GetClusterInfoReply, error)
	// NodeStats (state.Source) asks a node's raylet at its TCP address;
	// ListTasks queries the GCS's task events.
	state.Source
}

// grpcCluster is a cluster reached over gRPC.
type grpcCluster struct {
	addr  string
	creds *auth.Credentials
	gcs   pb.GcsClient
	tasks pb.TaskEventServiceClient
	conn  interface{ Close() error }
}

func dialCluster(addr string, creds *auth.Credentials) (*grpcCluster, error) {
	cc, err := rpc.Dial(addr, creds)
	if err != nil {
		return nil, fmt.Errorf("connecting to the GCS at %s: %w", addr, err)
	}
	return &grpcCluster{addr: addr, creds: creds, gcs: pb.NewGcsClient(cc), tasks: pb.NewTaskEventServiceClient(cc), conn: cc}, nil
}

// Close closes the GCS connection.
func (c *grpcCluster) Close() error { return c.conn.Close() }

func (c *grpcCluster) gcsErr(what string, err error) error {
	var te *auth.TLSError
	if errors.As(auth.ExplainTLS(c.addr, c.creds.TLS(), err), &te) {
		return te // says TLS is the problem, and how to set it
	}
	switch status.Code(err) {
	case codes.Unavailable:
		return fmt.Errorf("cannot reach the GCS at %s (is a goray head running there?): %w", c.addr, err)
	case codes.Unauthenticated:
		return fmt.Errorf("the GCS at %s refused this command: %w", c.addr, err)
	}
	return fmt.Errorf("querying %s from the GCS at %s: %w", what, c.addr, err)
}

// Nodes returns every node the GCS knows, dead ones included.
func (c *grpcCluster) Nodes(ctx context.Context) ([]*pb.NodeView, error) {
	r, err := c.gcs.GetAllNodes(ctx, &pb.GetAllNodesRequest{})
	if err != nil {
		return nil, c.gcsErr("nodes", err)
	}
	return r.GetNodes(), nil
}

// Jobs returns every job.
func (c *grpcCluster) Jobs(ctx context.Context) ([]*pb.JobInfo, error) {
	r, err := c.gcs.GetAllJobs(ctx, &pb.GetAllJobsRequest{})
	if err != nil {
		return nil, c.gcsErr("jobs", err)
	}
	return r.GetJobs(), nil
}

// Actors returns every actor.
func (c *grpcCluster) Actors(ctx context.Context) ([]*pb.ActorInfo, error) {
	r, err := c.gcs.ListActors(ctx, &pb.ListActorsRequest{})
	if err != nil {
		return nil, c.gcsErr("actors", err)
	}
	return r.GetActors(), nil
}

// ClusterInfo describes the GCS.
func (c *grpcCluster) ClusterInfo(ctx context.Context) (*pb.GetClusterInfoReply, error) {
	r, err := c.gcs.GetClusterInfo(ctx, &pb.GetClusterInfoRequest{})
	if err != nil {
		return nil, c.gcsErr("the GCS's state", err)
	}
	return r, nil
}

// NodeStats asks the raylet of node for its stats, at its TCP address
// (token-authenticated), so it works from any machine.
func (c *grpcCluster) NodeStats(ctx context.Context, node *pb.NodeInfo, includeOwned bool) (*pb.GetNodeStatsReply, error) {
	return state.RayletStats(ctx, node, c.creds, includeOwned)
}

// ListTasks queries the task events the GCS keeps.
func (c *grpcCluster) ListTasks(ctx context.Context, req *pb.ListTasksRequest) (*pb.ListTasksReply, error) {
	r, err := c.tasks.ListTasks(ctx, req)
	if err != nil {
		if status.Code(err) == codes.InvalidArgument {
			return nil, fmt.Errorf("the GCS refused the query: %s", status.Convert(err).Message())
		}
		return nil, c.gcsErr("tasks", err)
	}
	return r, nil
}

// checkSocket fails fast for a unix socket that is not on this machine.
func checkSocket(path string) error {
	if path == "" {
		return errors.New("no unix socket address")
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("unix socket path %q is not absolute", path)
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("socket %s is not on this machine: %w", path, err)
	}
	return nil
}

// shutdownNode asks the raylet at socket to stop its node.
func shutdownNode(ctx context.Context, socket, reason string, creds *auth.Credentials) error {
	if err := checkSocket(socket); err != nil {
		return err
	}
	cc, err := rpc.Dial(socket, creds)
	if err != nil {
		return err
	}
	defer cc.Close()
	_, err = pb.NewRayletClient(cc).ShutdownNode(ctx, &pb.ShutdownNodeRequest{Reason: reason})
	return err
}
