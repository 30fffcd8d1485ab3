package dashboard

import (
	"net/http"
	"net/url"
	"strings"
)

// withPublic serves the requests matching a pattern of public (mounted
// with HandlePublic) there, and every other through next (the token
// check).
func withPublic(public *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := public.Handler(r); pattern != "" {
			public.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin refuses a request that changes state (any method but GET,
// HEAD and OPTIONS) authenticated by the dashboard's cookie rather than
// an Authorization header, unless its Origin (else Referer) header names
// this server: a browser sends the cookie with any request to this host,
// also one a page of another site makes it send (CSRF); the goray CLI
// sends the Bearer header and no cookie.
func sameOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if r.Header.Get("Authorization") == "" && !SameOrigin(r) {
				WriteError(w, http.StatusForbidden, "%s %s: a browser's request from another origin (Origin %q) is refused; send the token as \"Authorization: Bearer <token>\"", r.Method, r.URL.Path, r.Header.Get("Origin"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// SameOrigin reports whether r's Origin header (else its Referer) names
// the host r was sent to. A request with neither is not a browser's
// cross-site request when it carries no cookie, so only a request with a
// cookie and neither header is refused.
func SameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		origin = r.Header.Get("Referer")
	}
	if origin == "" {
		return len(r.Cookies()) == 0
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}
