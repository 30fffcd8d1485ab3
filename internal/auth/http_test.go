package auth

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHTTPHandler(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("boom")
		}
		_, _ = w.Write([]byte("ok"))
	})
	on := mustNew(t, "s3cret", nil)
	off := mustDisabled(t, nil)
	cases := []struct {
		name   string
		creds  *Credentials
		path   string
		header string
		cookie string
		want   int
	}{
		{"no token", on, "/", "", "", http.StatusUnauthorized},
		{"wrong bearer", on, "/", "Bearer nope", "", http.StatusUnauthorized},
		{"not bearer", on, "/", "Basic czNjcmV0", "", http.StatusUnauthorized},
		{"bearer", on, "/", "Bearer s3cret", "", http.StatusOK},
		{"cookie", on, "/", "", "s3cret", http.StatusOK},
		{"wrong cookie", on, "/", "", "nope", http.StatusUnauthorized},
		{"disabled", off, "/", "", "", http.StatusOK},
		{"panic", on, "/panic", "Bearer s3cret", "", http.StatusInternalServerError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tc.path, nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			if tc.cookie != "" {
				r.AddCookie(&http.Cookie{Name: CookieName, Value: tc.cookie})
			}
			w := httptest.NewRecorder()
			tc.creds.HTTPHandler(ok).ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.want, w.Body)
			}
			if strings.Contains(w.Body.String(), "s3cret") {
				t.Fatalf("the response shows the token: %s", w.Body)
			}
			if tc.want == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
				t.Fatal("a refusal has no WWW-Authenticate header")
			}
		})
	}
	if !on.CheckToken("s3cret") || on.CheckToken("s3cre") || !off.CheckToken("") {
		t.Fatal("CheckToken")
	}
}
