package jobclient

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestBaseURL(t *testing.T) {
	for _, tc := range []struct {
		addr string
		tls  bool
		want string
		err  string
	}{
		{addr: "127.0.0.1:8265", want: "http://127.0.0.1:8265"},
		{addr: "127.0.0.1:8265", tls: true, want: "https://127.0.0.1:8265"},
		{addr: " http://head:8265/ ", tls: true, want: "http://head:8265"},
		{addr: "https://head:8265", want: "https://head:8265"},
		{addr: "", err: "empty dashboard address"},
		{addr: "ftp://head:21", err: "want http:// or https://"},
		{addr: "http://head:8265/api", err: "want scheme://host:port"},
		{addr: "http://", err: "want scheme://host:port"},
	} {
		got, err := BaseURL(tc.addr, tc.tls)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("BaseURL(%q): %q, %v; want an error with %q", tc.addr, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("BaseURL(%q, %v) = %q, %v; want %q", tc.addr, tc.tls, got, err, tc.want)
		}
	}
}

// TestEnsureBinaryRetriesWhenBusy: a head busy with other uploads (503)
// gets the upload again, from its first byte; other refusals are final.
func TestEnsureBinaryRetriesWhenBusy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "driver")
	if err := os.WriteFile(path, []byte("a job binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		refuse  int // status of the first PUT
		puts    int // PUTs the head sees
		wantErr string
	}{
		{"busy, then accepted", http.StatusServiceUnavailable, 2, ""},
		{"refused for good", http.StatusRequestEntityTooLarge, 1, "413"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			puts := 0
			var bodies []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodHead {
					w.WriteHeader(http.StatusNotFound)
					return
				}
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				puts++
				n := puts
				bodies = append(bodies, string(b))
				mu.Unlock()
				if n == 1 {
					w.WriteHeader(tc.refuse)
					_, _ = w.Write([]byte(`{"error":"try later"}`))
					return
				}
				_, _ = w.Write([]byte(`{"uploaded":true}`))
			}))
			defer srv.Close()
			c, err := New(srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			up, err := c.EnsureBinary(ctx, path, nil)
			mu.Lock()
			defer mu.Unlock()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || puts != tc.puts {
					t.Fatalf("EnsureBinary: %v after %d PUTs; want an error with %q after %d", err, puts, tc.wantErr, tc.puts)
				}
				return
			}
			if err != nil || !up.Uploaded || puts != tc.puts {
				t.Fatalf("EnsureBinary = %+v, %v after %d PUTs; want uploaded after %d", up, err, puts, tc.puts)
			}
			for i, b := range bodies {
				if b != "a job binary" {
					t.Errorf("PUT %d sent %q, want the whole file", i, b)
				}
			}
		})
	}
}
