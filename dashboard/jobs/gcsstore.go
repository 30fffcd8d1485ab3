package jobs

import (
	"bytes"
	"context"
	"encoding/hex"
	"time"

	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"google.golang.org/grpc"
)

// KVNamespace is the GCS KV namespace of the job records (key: the
// submission id, value: the Job as JSON).
const KVNamespace = "job_submission"

// GCSStore keeps job records in the GCS KV and finds drivers' jobs in the
// GCS's job table. Every call waits while the GCS is down (it restarts
// alone) until its context ends.
type GCSStore struct {
	gcs    pb.GcsClient
	target string
	node   []byte
}

// NewGCSStore returns the store of a head whose node id is node, on the
// connection to the GCS at target.
func NewGCSStore(gcs pb.GcsClient, target string, node []byte) *GCSStore {
	return &GCSStore{gcs: gcs, target: target, node: node}
}

// Put writes a record.
func (g *GCSStore) Put(ctx context.Context, id string, value []byte) error {
	return rpc.Retry(ctx, g.target, "KVPut", func(ctx context.Context, opts ...grpc.CallOption) error {
		_, err := g.gcs.KVPut(ctx, &pb.KVPutRequest{Ns: KVNamespace, Key: id, Value: value, Overwrite: true}, opts...)
		return err
	})
}

// Del removes a record.
func (g *GCSStore) Del(ctx context.Context, id string) error {
	return rpc.Retry(ctx, g.target, "KVDel", func(ctx context.Context, opts ...grpc.CallOption) error {
		_, err := g.gcs.KVDel(ctx, &pb.KVDelRequest{Ns: KVNamespace, Key: id}, opts...)
		return err
	})
}

// List returns every record.
func (g *GCSStore) List(ctx context.Context) (map[string][]byte, error) {
	var keys []string
	err := rpc.Retry(ctx, g.target, "KVKeys", func(ctx context.Context, opts ...grpc.CallOption) error {
		rep, err := g.gcs.KVKeys(ctx, &pb.KVKeysRequest{Ns: KVNamespace}, opts...)
		keys = rep.GetKeys()
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(keys))
	for _, k := range keys {
		var rep *pb.KVGetReply
		err := rpc.Retry(ctx, g.target, "KVGet", func(ctx context.Context, opts ...grpc.CallOption) error {
			var err error
			rep, err = g.gcs.KVGet(ctx, &pb.KVGetRequest{Ns: KVNamespace, Key: k}, opts...)
			return err
		})
		if err != nil {
			return nil, err
		}
		if rep.GetFound() {
			out[k] = rep.GetValue()
		}
	}
	return out, nil
}

// DriverJob finds the goray job whose driver is process pid on this node,
// registered at since or later (an older one had the same pid).
func (g *GCSStore) DriverJob(ctx context.Context, pid int, since time.Time) (string, bool, error) {
	rep, err := g.gcs.GetAllJobs(ctx, &pb.GetAllJobsRequest{})
	if err != nil {
		return "", false, err
	}
	for _, j := range rep.GetJobs() {
		if int(j.GetDriverPid()) == pid && bytes.Equal(j.GetDriverNodeId(), g.node) && j.GetStartTimeMs() >= since.UnixMilli() {
			return hex.EncodeToString(j.GetJobId()), true, nil
		}
	}
	return "", false, nil
}
