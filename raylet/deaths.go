package raylet

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Batched worker deaths: a local driver's or worker's death is told to
// every other alive node (its objects there are freed, and processes there
// drop it as a borrower), in WorkersDied messages that carry every death
// not sent to that node yet. Each peer has at most one sender, and only
// while it has deaths to send: a lone death goes out at once, and deaths
// that occur while a send to a peer is in flight go in that peer's next
// message. A burst of k deaths costs each peer at most two messages, not k.
//
// The deaths are kept once, in one log, whatever the number of peers; a
// peer with a sender holds only its position in the log. The log is
// bounded (maxDeathLog); when it overflows, the oldest deaths are dropped
// for the peers that were not sent them yet, with a warning and a count
// (see deathNotifier.dropped).

// maxDeathLog bounds the deaths kept for peers not told yet. It is also
// the most ids one WorkersDied carries: 8,192 ids are about 150 KB.
const maxDeathLog = 8192

// deathNotifier sends the deaths of local drivers and workers to the
// other nodes of the view. mu guards every field but dropped.
type deathNotifier struct {
	cv    *clusterView
	self  []byte // this node's id, as WorkersDiedRequest.node_id
	limit int    // maxDeathLog (lowered by tests)

	mu     sync.Mutex
	log    [][]byte // deaths, by number: log[i] is number base+i
	base   uint64
	peers  map[ids.ID]*deathPeer // the peers with a sender running
	closed bool

	// dropped counts deaths that a peer was never sent because the log
	// overflowed before its sender reached them.
	dropped atomic.Int64
}

// deathPeer is one peer's sender state: the number of the first death it
// was not sent yet.
type deathPeer struct {
	next uint64
}

func newDeathNotifier(cv *clusterView) *deathNotifier {
	return &deathNotifier{cv: cv, self: cv.nodeID.Bytes(), limit: maxDeathLog, peers: map[ids.ID]*deathPeer{}}
}

// died queues the death of the local driver or worker id for every alive
// node of the view, starting a sender for each peer that has none. It
// never blocks on the network.
func (d *deathNotifier) died(id ids.ID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	num := d.base + uint64(len(d.log))
	d.log = append(d.log, id.Bytes())
	for _, p := range d.cv.view.Load().list {
		if !p.Alive || p.Info.GetRayletTcp() == "" {
			continue
		}
		if _, ok := d.peers[p.ID]; ok {
			continue // its sender will send this death with the others
		}
		d.peers[p.ID] = &deathPeer{next: num}
		d.cv.wg.Add(1)
		go d.send(p.ID)
	}
	d.trimLocked()
}

// trimLocked drops the deaths every sender is past and, when the log
// still holds more than limit, the oldest ones (lost for the senders not
// past them: they count them when they next read the log).
func (d *deathNotifier) trimLocked() {
	if len(d.peers) == 0 {
		d.base += uint64(len(d.log))
		d.log = nil
		return
	}
	if len(d.log) <= d.limit {
		return
	}
	low := d.base + uint64(len(d.log))
	for _, st := range d.peers {
		low = min(low, st.next)
	}
	low = max(low, d.base+uint64(len(d.log)-d.limit))
	d.log = d.log[low-d.base:]
	d.base = low
}

// send is peer's sender: it sends the deaths the peer was not sent yet,
// one WorkersDied at a time, until there are none, the peer is dead or
// forgotten. A failed send is dropped with a log line, as a single
// notification was.
func (d *deathNotifier) send(peer ids.ID) {
	defer d.cv.wg.Done()
	for {
		batch, lost, ok := d.next(peer)
		if lost > 0 {
			d.dropped.Add(int64(lost))
			d.cv.log.Warn("worker deaths not told to a node: too many deaths while a send to it was under way",
				"node_id", peer, "dropped", lost, "limit", d.limit)
		}
		if !ok {
			return
		}
		p := d.cv.peer(peer)
		if p == nil || !p.Alive {
			d.forget([]ids.ID{peer})
			d.cv.log.Debug("not telling a dead node of worker deaths", "node_id", peer, "deaths", len(batch))
			return
		}
		cli, err := d.cv.client(p)
		if err != nil {
			d.cv.log.Debug("not telling another node", "what", "worker died", "node_id", peer, "error", err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), gcsTimeout)
		_, err = cli.WorkersDied(ctx, &gorayv1.WorkersDiedRequest{WorkerIds: batch, NodeId: d.self})
		cancel()
		if err != nil {
			d.cv.log.Debug("telling another node failed", "what", "worker died", "node_id", peer, "deaths", len(batch), "error", err)
		}
	}
}

// next takes the deaths peer was not sent yet, and how many it lost to
// the log's bound; ok is false (and the peer's sender state is gone) when
// there are none or the peer was forgotten.
func (d *deathNotifier) next(peer ids.ID) (batch [][]byte, lost uint64, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.peers[peer]
	if st == nil {
		return nil, 0, false
	}
	if st.next < d.base {
		lost, st.next = d.base-st.next, d.base
	}
	end := d.base + uint64(len(d.log))
	if st.next == end {
		delete(d.peers, peer)
		d.trimLocked()
		return nil, lost, false
	}
	// The log's entries are never written again once appended: the batch
	// shares them.
	batch = d.log[st.next-d.base : end-d.base : end-d.base]
	st.next = end
	return batch, lost, true
}

// forget drops the queues of nodes that died: their senders stop after
// the send under way.
func (d *deathNotifier) forget(nodes []ids.ID) {
	if len(nodes) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range nodes {
		delete(d.peers, n)
	}
	d.trimLocked()
}

// close takes no more deaths. Senders finish what they have (at most the
// send under way and one more per peer); clusterView.close waits for them.
func (d *deathNotifier) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
}
