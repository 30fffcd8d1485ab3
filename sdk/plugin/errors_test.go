package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/proto/pluginv1"
)

var (
	errMissing = errors.New("missing")
	errDenied  = errors.New("denied")
	errBusy    = errors.New("busy")
)

var testTable = ErrorTable{
	{Name: "missing", Errors: []error{errMissing}, Code: codes.NotFound},
	{Name: "denied", Errors: []error{errDenied}, Code: codes.PermissionDenied, AlsoCodes: []codes.Code{codes.Unauthenticated}},
	{Name: "timeout", Errors: []error{context.DeadlineExceeded}, Code: codes.DeadlineExceeded},
	{Name: "busy", Errors: []error{errBusy}, Code: codes.NotFound}, // shares a code: never read from a bare code
}

func TestErrorTable(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		kind  string
		code  codes.Code
		kinds []string
	}{
		{"sentinel", errMissing, "missing", codes.NotFound, []string{"missing"}},
		{"wrapped", fmt.Errorf("op: %w", errDenied), "denied", codes.PermissionDenied, []string{"denied"}},
		{"context", context.DeadlineExceeded, "timeout", codes.DeadlineExceeded, []string{"timeout"}},
		{"two kinds: first wins", errors.Join(errBusy, errMissing), "missing", codes.NotFound, []string{"missing", "busy"}},
		{"plain", errors.New("x"), "", codes.Unknown, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kind, code := testTable.Classify(tc.err)
			if kind != tc.kind || code != tc.code {
				t.Errorf("Classify = %q %v, want %q %v", kind, code, tc.kind, tc.code)
			}
			if got := testTable.Kinds(tc.err); fmt.Sprint(got) != fmt.Sprint(tc.kinds) {
				t.Errorf("Kinds = %v, want %v", got, tc.kinds)
			}
			// Across the boundary the error keeps its identity.
			re := testTable.Remote("msg", testTable.Kinds(tc.err))
			for _, k := range tc.kinds {
				row, _ := testTable.Named(k)
				if !errors.Is(re, row.Errors[0]) {
					t.Errorf("remote error does not match %v", row.Errors[0])
				}
			}
			var asRemote *RemoteError
			if !errors.As(fmt.Errorf("call: %w", re), &asRemote) || asRemote.Kind != tc.kind || asRemote.Error() != "msg" {
				t.Errorf("errors.As: %+v", asRemote)
			}
		})
	}
}

func TestErrorTableForCode(t *testing.T) {
	tests := []struct {
		code codes.Code
		kind string
	}{
		{codes.NotFound, "missing"},
		{codes.PermissionDenied, "denied"},
		{codes.Unauthenticated, "denied"},
		{codes.DeadlineExceeded, "timeout"},
		{codes.Unavailable, ""},
	}
	for _, tc := range tests {
		k, ok := testTable.ForCode(tc.code)
		if k.Name != tc.kind || ok != (tc.kind != "") {
			t.Errorf("ForCode(%v) = %q %v, want %q", tc.code, k.Name, ok, tc.kind)
		}
	}
	re := testTable.Remote("gone", []string{"nonsense"}, errBusy)
	if re.Kind != "" || !errors.Is(re, errBusy) || errors.Is(re, errMissing) {
		t.Errorf("unknown kind: %+v", re)
	}
}

func TestStatusError(t *testing.T) {
	err := StatusError(codes.NotFound, "storage read of \"k\": missing", &pluginv1.HealthResponse{Message: "detail"})
	st := status.Convert(err)
	if st.Code() != codes.NotFound || st.Message() != "storage read of \"k\": missing" {
		t.Fatalf("status %v", st)
	}
	d, ok := DetailOf[*pluginv1.HealthResponse](st)
	if !ok || d.GetMessage() != "detail" {
		t.Fatalf("detail %v %v", d, ok)
	}
	if _, ok := DetailOf[*pluginv1.GetInfoResponse](st); ok {
		t.Error("found a detail of another type")
	}
}

func TestLostConnection(t *testing.T) {
	canceled := status.New(codes.Canceled, "context canceled")
	live := context.Background()
	if got := LostConnection(live, canceled); got.Code() != codes.Unavailable {
		t.Errorf("cancelled with a live context: %v, want Unavailable", got.Code())
	}
	done, cancel := context.WithCancel(live)
	cancel()
	if got := LostConnection(done, canceled); got.Code() != codes.Canceled {
		t.Errorf("cancelled by the caller: %v, want Canceled", got.Code())
	}
}

func TestRecover(t *testing.T) {
	call := func() (err error) {
		defer Recover(&err, "storage read of %q", "k")
		panic("boom")
	}
	err := call()
	if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), `storage read of "k" panicked: boom`) {
		t.Fatalf("recovered %v", err)
	}
}
