package dashboard

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/leaktest"
)

func TestPublicRoutesAndSameOrigin(t *testing.T) {
	leaktest.Goroutines(t)
	s := serve(t, Options{Port: -1})
	s.HandlePublic("GET /open", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "open") }))
	s.Handle("POST /change", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "changed") }))
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	self := s.URL()
	for _, tc := range []struct {
		name           string
		method, path   string
		bearer, cookie string
		origin         string
		code           int
		body           string
	}{
		{"public route without the token", "GET", "/open", "", "", "", 200, "open"},
		{"other route without the token", "GET", "/hello", "", "", "", 401, "no token"},
		{"a public pattern does not open its neighbours", "GET", "/open/more", "", "", "", 401, "no token"},
		{"cookie GET", "GET", "/hello", "", token, "", 200, "hello"},
		{"wrong cookie", "GET", "/hello", "", "nope", "", 401, "wrong token"},
		{"cookie POST from this origin", "POST", "/change", "", token, self, 200, "changed"},
		{"cookie POST from another origin", "POST", "/change", "", token, "http://evil.example", 403, "another origin"},
		{"cookie POST without Origin or Referer", "POST", "/change", "", token, "", 403, "another origin"},
		{"Bearer POST from anywhere", "POST", "/change", token, "", "http://evil.example", 200, "changed"},
		{"cross-origin POST without the token", "POST", "/change", "", "", "http://evil.example", 401, "no token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, s.URL()+tc.path, nil)
			if tc.bearer != "" {
				req.Header.Set("Authorization", "Bearer "+tc.bearer)
			}
			if tc.cookie != "" {
				req.AddCookie(&http.Cookie{Name: auth.CookieName, Value: tc.cookie})
			}
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.body) {
				t.Errorf("%s %s: %d %q; want %d %q", tc.method, tc.path, resp.StatusCode, b, tc.code, tc.body)
			}
		})
	}
}
