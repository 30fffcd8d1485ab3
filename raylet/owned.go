package raylet

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
)

// Bounds of ownedOfClients, the gathering behind GetNodeStats with
// include_owned (`goray list objects`, `goray memory` from any machine).
const (
	ownedFanout  = 16
	ownedTimeout = 5 * time.Second
)

// ownedOfClients asks each of the node's drivers and workers what it owns
// (ListOwned over its unix socket), at most ownedFanout at a time and each
// within ownedTimeout, so that a caller on another machine reaches them all
// through one call to this raylet. Clients that do not answer are skipped
// and named in the second result.
func (r *Raylet) ownedOfClients(ctx context.Context, clients []*gorayv1.Address) ([]*gorayv1.ListOwnedReply, []string) {
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		sem     = make(chan struct{}, ownedFanout)
		replies []*gorayv1.ListOwnedReply
		errs    []string
		seen    = map[string]bool{}
	)
	for _, a := range clients {
		path := a.GetUnixPath()
		if path == "" || seen[path] {
			continue
		}
		seen[path] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				mu.Lock()
				errs = append(errs, fmt.Sprintf("process %s: %v", shortWorker(a.GetWorkerId()), ctx.Err()))
				mu.Unlock()
				return
			}
			defer func() { <-sem }()
			rep, err := r.listOwned(ctx, a)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Sprintf("process %s at %s: ListOwned: %v", shortWorker(a.GetWorkerId()), path, err))
				return
			}
			if rep.GetOwner() == nil {
				rep.Owner = a
			}
			replies = append(replies, rep)
		}()
	}
	wg.Wait()
	slices.SortFunc(replies, func(x, y *gorayv1.ListOwnedReply) int {
		return cmp.Compare(string(x.GetOwner().GetWorkerId()), string(y.GetOwner().GetWorkerId()))
	})
	slices.Sort(errs)
	return replies, errs
}

func (r *Raylet) listOwned(ctx context.Context, a *gorayv1.Address) (*gorayv1.ListOwnedReply, error) {
	ctx, cancel := context.WithTimeout(ctx, ownedTimeout)
	defer cancel()
	cc, err := rpc.Dial(a.GetUnixPath(), r.cfg.Auth)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	return gorayv1.NewCoreWorkerClient(cc).ListOwned(ctx, &gorayv1.ListOwnedRequest{})
}

func shortWorker(b []byte) string {
	id, err := ids.FromBytes(b)
	if err != nil {
		return fmt.Sprintf("%x", b)
	}
	return id.Short()
}
