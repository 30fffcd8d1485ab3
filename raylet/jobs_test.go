package raylet

import (
	"errors"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// TestJobTable: a job is usable once ready, refused while reserved, gone
// once finished (finish happens once), and the table refuses everything
// once closed.
func TestJobTable(t *testing.T) {
	tbl := newJobTable(ids.New(), hclog.NewNullLogger(), nil)
	j := &job{id: ids.New(), info: &gorayv1.JobInfo{}, driverID: ids.New(), out: newOutbox()}
	if err := tbl.reserve(j); err != nil {
		t.Fatal(err)
	}
	if err := tbl.reserve(&job{id: j.id}); err == nil {
		t.Fatal("a job id reserved twice")
	}
	var nf *JobNotFoundError
	if _, err := tbl.lookup(j.id); !errors.As(err, &nf) {
		t.Fatalf("lookup of a reserved job: %v, want JobNotFoundError", err)
	}
	j.ready.Store(true)
	if got, err := tbl.lookup(j.id); err != nil || got != j {
		t.Fatalf("lookup of a ready job: %v, %v", got, err)
	}
	if !tbl.isDriver(j.driverID) {
		t.Fatal("the job's driver is not known as a driver")
	}
	tbl.push(ids.Nil, func() *gorayv1.RayletCommand { return &gorayv1.RayletCommand{} })
	if n := len(j.out.take()); n != 1 {
		t.Fatalf("the driver got %d commands, want 1", n)
	}
	if !tbl.finish(j) || tbl.finish(j) {
		t.Fatal("finish must succeed exactly once")
	}
	if got, err := tbl.lookup(j.id); got != nil || err != nil {
		t.Fatalf("lookup of a finished job: %v, %v; want unknown", got, err)
	}
	tbl.close()
	if _, err := tbl.lookup(ids.New()); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("lookup after close: %v", err)
	}
	if _, err := tbl.addRemote(ids.New(), &gorayv1.JobInfo{}); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("addRemote after close: %v", err)
	}
}
