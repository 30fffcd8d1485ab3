package core

import (
	"slices"
	"testing"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// TestFreeNamesOnlyNodesHoldingACopy: the free of an owned store object
// names its primary copy's node and the nodes of the processes that
// borrowed it (they may have pulled a copy), each once, even after they
// stopped borrowing; no other node.
func TestFreeNamesOnlyNodesHoldingACopy(t *testing.T) {
	primary, b1, b2 := ids.New(), ids.New(), ids.New()
	borrower := func(node ids.ID) *pb.Address {
		return &pb.Address{WorkerId: ids.New().Bytes(), NodeId: node.Bytes(), UnixPath: "/nonexistent/b.sock"}
	}
	tests := []struct {
		name      string
		borrowers []*pb.Address
		want      []ids.ID
	}{
		{"one copy, no borrower", nil, []ids.ID{primary}},
		{"a borrower on another node", []*pb.Address{borrower(b1)}, []ids.ID{b1, primary}},
		{"two borrowers on one node", []*pb.Address{borrower(b1), borrower(b1)}, []ids.ID{b1, primary}},
		{"borrowers on two nodes", []*pb.Address{borrower(b1), borrower(b2)}, []ids.ID{b1, b2, primary}},
		{"a borrower on the primary's node", []*pb.Address{borrower(primary)}, []ids.ID{primary}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cw := newTestWorker(t)
			tb := cw.objects
			id := ids.ObjectIDFor(cw.idgen.Next(), 0)
			tb.newOwned(id, nil, 1)
			ret := storeRet(id)
			ret.NodeId = primary.Bytes()
			tb.complete(id, ret, nil, false)
			for _, b := range tt.borrowers {
				tb.updateBorrowers(&pb.UpdateBorrowersRequest{Borrower: b, Add: [][]byte{id.Bytes()}})
			}
			// The borrowers are done before the owner frees: their nodes'
			// copies remain and must still be freed.
			for _, b := range tt.borrowers {
				tb.updateBorrowers(&pb.UpdateBorrowersRequest{Borrower: b, Remove: [][]byte{id.Bytes()}})
			}
			tb.removeLocal(id)
			if len(tb.frees) != 1 || tb.frees[0].id != id {
				t.Fatalf("store copy not queued for freeing: %v", tb.frees)
			}
			if got := tb.frees[0].nodes; !slices.Equal(got, tt.want) {
				t.Errorf("free goes to %v, want %v", got, tt.want)
			}
		})
	}
}
