package s3store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/goray-dev/goray/sdk/storage"
)

func TestClassify(t *testing.T) {
	c := &config{bucket: "b", endpoint: "s3.example:9000", accessKeyID: "AKIDEXAMPLE"}
	resp := func(code string, status int) error {
		return fmt.Errorf("wrapped: %w", minio.ErrorResponse{Code: code, StatusCode: status, Message: "msg"})
	}
	refused := &url.Error{Op: "Put", URL: "http://s3.example:9000/b/k", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	tests := []struct {
		err  error
		want error
		says string
	}{
		{resp("NoSuchKey", 404), storage.ErrNotFound, ""},
		{resp("InvalidRange", 416), storage.ErrInvalidRange, ""},
		{resp("InvalidAccessKeyId", 403), storage.ErrPermission, `"AKIDEXAMPLE" is not known`},
		{resp("SignatureDoesNotMatch", 403), storage.ErrPermission, `does not match the access key "AKIDEXAMPLE"`},
		{resp("AccessDenied", 403), storage.ErrPermission, "AKIDEXAMPLE"},
		{resp("ExpiredToken", 400), storage.ErrPermission, ""},
		{resp("", 403), storage.ErrPermission, ""},
		{resp("SlowDown", 503), storage.ErrUnavailable, ""},
		{resp("InternalError", 500), storage.ErrUnavailable, ""},
		{resp("", 502), storage.ErrUnavailable, ""},
		{resp("NoSuchBucket", 404), storage.ErrUnavailable, `bucket "b" does not exist`},
		{refused, storage.ErrUnavailable, "s3.example:9000"},
		{fmt.Errorf("part 3: %w", refused), storage.ErrUnavailable, ""},
		{context.Canceled, context.Canceled, ""},
		{fmt.Errorf("%w: x", storage.ErrSizeMismatch), storage.ErrSizeMismatch, ""},
	}
	for _, tc := range tests {
		got := c.classify(tc.err)
		if !errors.Is(got, tc.want) || !strings.Contains(got.Error(), tc.says) {
			t.Errorf("classify(%v) = %v, want %v saying %q", tc.err, got, tc.want, tc.says)
		}
	}
	if got := c.classify(errors.New("odd")); errors.Is(got, storage.ErrUnavailable) || errors.Is(got, storage.ErrPermission) {
		t.Errorf("an unknown error became %v", got)
	}
}

func TestContentRangeTotal(t *testing.T) {
	if n, ok := contentRangeTotal("bytes 5-9/3221225472"); !ok || n != 3<<30 {
		t.Errorf("got %d %v", n, ok)
	}
	if _, ok := contentRangeTotal("bytes 5-9/*"); ok {
		t.Error("an unknown total parsed")
	}
}
