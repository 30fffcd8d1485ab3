package dashboard

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/waitfor"
)

const token = "dashboard-test-token-0123"

func serve(t *testing.T, o Options) *Server {
	t.Helper()
	if o.Auth == nil {
		var err error
		if o.Auth, err = auth.New(token, nil); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Listen(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Handle("GET /hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") }))
	s.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}

func get(t *testing.T, hc *http.Client, url, tok string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServerChecksTheToken(t *testing.T) {
	leaktest.Goroutines(t)
	s := serve(t, Options{Port: -1})
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	for _, tc := range []struct {
		tok  string
		code int
		body string
	}{{"", 401, "no token"}, {"nope", 401, "wrong token"}, {token, 200, "hello"}} {
		if code, body := get(t, hc, s.URL()+"/hello", tc.tok); code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("GET /hello with %q: %d %q; want %d %q", tc.tok, code, body, tc.code, tc.body)
		}
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Errorf("default host: %s", s.Addr())
	}
}

func TestServerPorts(t *testing.T) {
	leaktest.Goroutines(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	// A configured port that is taken is an error naming it.
	_, err = Listen(Options{Port: port})
	var pe *PortInUseError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), strconv.Itoa(port)) || !strings.Contains(err.Error(), "--dashboard-port") {
		t.Fatalf("Listen on a taken port: %v", err)
	}
	// A bad host is an error naming the setting.
	if _, err := Listen(Options{Host: "256.0.0.1", Port: -1}); err == nil || !strings.Contains(err.Error(), "dashboard { host, port }") {
		t.Errorf("Listen on a bad host: %v", err)
	}
}

func TestServerTLS(t *testing.T) {
	leaktest.Goroutines(t)
	dir := t.TempDir()
	if err := auth.CreateCA(dir, "test", time.Hour); err != nil {
		t.Fatal(err)
	}
	cert, key, err := auth.IssueCert(dir, dir, "head", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := auth.New(token, &auth.TLSFiles{CA: dir + "/" + auth.CAFile, Cert: cert, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, Options{Port: -1, Auth: creds})
	if !strings.HasPrefix(s.URL(), "https://") {
		t.Fatalf("URL with TLS: %s", s.URL())
	}
	hc := &http.Client{Transport: creds.HTTPTransport()}
	defer hc.CloseIdleConnections()
	if code, body := get(t, hc, s.URL()+"/hello", token); code != 200 || body != "hello" {
		t.Fatalf("GET over TLS: %d %q", code, body)
	}
	if code, _ := get(t, hc, s.URL()+"/hello", ""); code != 401 {
		t.Fatalf("GET over TLS without the token: %d", code)
	}
	// Plain HTTP to the TLS port gets nowhere.
	plain := &http.Client{Transport: &http.Transport{}}
	defer plain.CloseIdleConnections()
	resp, err := plain.Get("http://" + s.Addr() + "/hello")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP served by the TLS server")
		}
	}
}
