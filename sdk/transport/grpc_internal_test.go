package transport

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Status errors without goray's detail (an older plugin, a method it lacks,
// a dead connection) still map to the sentinel errors by code.
func TestFromStatusByCode(t *testing.T) {
	tests := []struct {
		code  codes.Code
		match error
	}{
		{codes.Aborted, ErrAborted},
		{codes.InvalidArgument, ErrBadMetadata},
		{codes.Unimplemented, ErrNotSupported},
		{codes.DeadlineExceeded, ErrTimeout},
		{codes.DeadlineExceeded, context.DeadlineExceeded},
	}
	for _, tc := range tests {
		err := fromStatus(context.Background(), OpSend, "0a", status.Error(tc.code, "x"))
		if !errors.Is(err, tc.match) {
			t.Errorf("code %v: %v does not match %v", tc.code, err, tc.match)
		}
		var te *TransferError
		if !errors.As(err, &te) || te.ObjectID != "0a" || te.Op != OpSend {
			t.Errorf("code %v: %v is not a TransferError for 0a/send", tc.code, err)
		}
	}
	// Canceled matches context.Canceled only when the caller's context
	// ended; otherwise the plugin's connection was lost: Unavailable.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := fromStatus(cancelled, OpSend, "0a", status.Error(codes.Canceled, "x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Canceled with the caller's context ended: %v does not match context.Canceled", err)
	}
	if err := fromStatus(context.Background(), OpSend, "0a", status.Error(codes.Canceled, "x")); errors.Is(err, context.Canceled) || status.Code(err) != codes.Unavailable {
		t.Errorf("Canceled with the caller's context alive: %v (code %v), want Unavailable", err, status.Code(err))
	}
	err := fromStatus(context.Background(), OpReceive, "0a", status.Error(codes.Unavailable, "plugin restarting"))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Unavailable became %v (code %v)", err, status.Code(err))
	}
	for _, s := range []error{ErrAborted, ErrBadMetadata, ErrNotSupported, ErrTimeout} {
		if errors.Is(err, s) {
			t.Errorf("Unavailable matches %v", s)
		}
	}
	// A known kind without detail keeps the status in the chain, as in
	// storage: callers can read the code.
	if err := fromStatus(context.Background(), OpSend, "0a", status.Error(codes.DeadlineExceeded, "slow")); status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, ErrTimeout) {
		t.Errorf("DeadlineExceeded without detail: %v (code %v), want code DeadlineExceeded matching ErrTimeout", err, status.Code(err))
	}
	if err := fromStatus(context.Background(), OpInfo, "", errors.New("plain")); err == nil || err.Error() != "transport info: plain" {
		t.Errorf("non-status error became %v", err)
	}
}

func TestToStatusCodes(t *testing.T) {
	tests := []struct {
		err  error
		code codes.Code
	}{
		{ErrAborted, codes.Aborted},
		{ErrBadMetadata, codes.InvalidArgument},
		{ErrNotSupported, codes.Unimplemented},
		{ErrTimeout, codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{errors.New("x"), codes.Unknown},
	}
	for _, tc := range tests {
		if got := status.Code(toStatus(OpReceive, "0a", tc.err)); got != tc.code {
			t.Errorf("%v -> %v, want %v", tc.err, got, tc.code)
		}
	}
	if toStatus(OpReceive, "0a", nil) != nil {
		t.Error("nil error became a status")
	}
}
