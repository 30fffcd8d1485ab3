package dashboard

import (
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/connlimit"
	"github.com/goray-dev/goray/internal/leaktest"
)

// TestServerClosesUnauthenticated: a connection that sent nothing, and one
// whose request was refused, are closed at the (lowered) deadline; a
// connection whose request passed the token check is kept alive and used
// again.
func TestServerClosesUnauthenticated(t *testing.T) {
	leaktest.Goroutines(t)
	defer connlimit.SetDefaultDeadline(2 * time.Second)()
	s := serve(t, Options{Port: -1})
	tr := &http.Transport{}
	hc := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	if code, _ := get(t, hc, s.URL()+"/hello", token); code != 200 {
		t.Fatalf("authenticated GET: %d", code)
	}

	idle, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	refused, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	if _, err := io.WriteString(refused, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]net.Conn{"idle": idle, "refused": refused} {
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("the %s connection was not closed by the server: %v", name, err)
		}
	}

	// Both deadlines have passed since the authenticated connection
	// was opened: it is still there, and the next request uses it.
	reused := false
	req, _ := http.NewRequest("GET", s.URL()+"/hello", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
	}))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || !reused {
		t.Fatalf("second authenticated GET: %d, reused connection %v; want 200 over the first connection", resp.StatusCode, reused)
	}
	if l := s.lis.(*connlimit.Listener); l.Expired() != 2 || l.Pending() != 0 {
		t.Fatalf("expired %d, pending %d; want 2, 0", l.Expired(), l.Pending())
	}
}
