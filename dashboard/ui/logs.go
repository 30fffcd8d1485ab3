package ui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/goray-dev/goray/dashboard"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
)

// DefaultLogTail is how many lines of a log file /logs/ serves unless
// ?tail says otherwise; MaxLogTail bounds tail.
const (
	DefaultLogTail = 1000
	MaxLogTail     = 100000
)

// workerLogURL is where the stdout of a worker is served.
func workerLogURL(node, worker string) string {
	return "/logs/" + node + "/worker-" + worker + ".out"
}

// logFile serves the last lines of a node's log file, read from the
// node's raylet (service LogFiles, which confines names to the node's
// logs directory).
func (u *UI) logFile(w http.ResponseWriter, r *http.Request) {
	node, file := r.PathValue("node"), r.PathValue("file")
	tail := DefaultLogTail
	if v := r.URL.Query().Get("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxLogTail {
			dashboard.WriteError(w, http.StatusBadRequest, "GET /logs/%s/%s: query parameter tail=%q: want a whole number from 0 (all) to %d", node, file, v, MaxLogTail)
			return
		}
		tail = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	info, err := u.findNode(ctx, node)
	if err != nil {
		dashboard.WriteError(w, http.StatusNotFound, "GET /logs/%s/%s: %v", node, file, err)
		return
	}
	cc, err := rpc.Dial(info.GetRayletTcp(), u.o.Auth)
	if err != nil {
		dashboard.WriteError(w, http.StatusBadGateway, "GET /logs/%s/%s: %v", node, file, err)
		return
	}
	defer cc.Close()
	stream, err := pb.NewLogFilesClient(cc).ReadLog(ctx, &pb.ReadLogRequest{Name: file, TailLines: int64(tail)})
	if err == nil {
		var c *pb.LogChunk
		c, err = stream.Recv()
		if err == nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			for err == nil {
				if _, werr := w.Write(c.GetData()); werr != nil {
					return
				}
				c, err = stream.Recv()
			}
			if !errors.Is(err, io.EOF) {
				fmt.Fprintf(w, "\n[goray: reading stopped: %v]\n", err)
			}
			return
		}
	}
	if errors.Is(err, io.EOF) { // an empty file
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		return
	}
	dashboard.WriteError(w, http.StatusBadGateway, "GET /logs/%s/%s: %v", node, file, err)
}

// findNode finds an alive node by its id (hex) or a prefix of it.
func (u *UI) findNode(ctx context.Context, id string) (*pb.NodeInfo, error) {
	vs, err := u.o.Source.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var found *pb.NodeInfo
	for _, v := range vs {
		in := v.GetInfo()
		if in.GetState() == "ALIVE" && id != "" && strings.HasPrefix(hexID(in.GetNodeId()), strings.ToLower(id)) {
			if found != nil {
				return nil, fmt.Errorf("node id prefix %q names more than one node", id)
			}
			found = in
		}
	}
	if found == nil {
		return nil, fmt.Errorf("no alive node has id %q", id)
	}
	if found.GetRayletTcp() == "" {
		return nil, fmt.Errorf("node %s has no raylet TCP address", short(id))
	}
	return found, nil
}
