package ui

import (
	"net/http"
	"strings"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/internal/auth"
)

// maxLoginBody bounds the login form.
const maxLoginBody = 8 << 10

// requireLogin serves next (behind the token check) to a request with
// the token and sends any other to the login page.
func (u *UI) requireLogin(next http.Handler) http.Handler {
	checked := u.o.Auth.HTTPHandler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u.o.Auth.CheckHTTP(r) != nil {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		checked.ServeHTTP(w, r)
	})
}

// loginData fills the login template.
type loginData struct {
	Error string
}

func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) {
	u.render(w, http.StatusOK, "login.html", loginData{})
}

// login checks the pasted token and keeps it in the cookie.
func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	if !dashboard.SameOrigin(r) {
		u.render(w, http.StatusForbidden, "login.html", loginData{Error: "This login form was sent from another site (Origin " + r.Header.Get("Origin") + "); open the dashboard's own page."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		u.render(w, http.StatusBadRequest, "login.html", loginData{Error: "The form could not be read: " + err.Error()})
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	if token == "" || !u.o.Auth.CheckToken(token) {
		u.refusals.Log(u.log, auth.PeerHost(r.RemoteAddr), "dashboard login refused: wrong token")
		u.render(w, http.StatusUnauthorized, "login.html", loginData{Error: "That is not this cluster's token."})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: auth.CookieName, Value: token, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout clears the cookie (only when asked from the dashboard's own
// page: another site cannot log a browser out).
func (u *UI) logout(w http.ResponseWriter, r *http.Request) {
	if !dashboard.SameOrigin(r) {
		u.render(w, http.StatusForbidden, "login.html", loginData{Error: "This logout was sent from another site (Origin " + r.Header.Get("Origin") + "); use the dashboard's own page."})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: auth.CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
