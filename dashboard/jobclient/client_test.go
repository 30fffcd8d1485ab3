package jobclient

import (
	"strings"
	"testing"
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
