package webui

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/orrery-dev/orrery/internal/access"
)

const loginCookie = "orrery_login"

// tokenChars is the length of randomString's tokens (32 bytes, base64url).
const tokenChars = 43

func randomString() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s *Server) secure(r *http.Request) bool { return s.cfg.SecureCookies || r.TLS != nil }

// loginPage shows the sign-in form. A random token, in a cookie and in the
// form, must match on POST, so no other site can sign a browser in with
// its own key (login CSRF).
func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if s.cfg.AuthOff {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	// One token per browser: a page loaded twice (a prefetch, a second
	// tab) must not invalidate the form already shown.
	token := randomString()
	if c, err := r.Cookie(loginCookie); err == nil && len(c.Value) == tokenChars {
		token = c.Value
	}
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: token, Path: "/login", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.secure(r), MaxAge: 3600})
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, r, nil, http.StatusOK, "login", map[string]any{"Token": token, "Next": safeNext(r.URL.Query().Get("next")),
		"Error": r.URL.Query().Get("error")})
}

// safeNext keeps a post-sign-in destination on this site: a path, no
// scheme or host, no control character or backslash (browsers drop tabs
// and newlines, so "/\t/evil.example" would become "//evil.example").
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || len(next) > 2000 || strings.ContainsAny(next, "\\") ||
		strings.IndexFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	return u.RequestURI()
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.cfg.AuthOff {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	c, err := r.Cookie(loginCookie)
	if err != nil || len(c.Value) != tokenChars || subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostFormValue("token"))) != 1 {
		s.fail(w, r, nil, errCSRF)
		return
	}
	next := safeNext(r.PostFormValue("next"))
	sess, err := s.cfg.Access.StartSession(r.Context(), strings.TrimSpace(r.PostFormValue("key")))
	if errors.Is(err, access.ErrUnauthenticated) {
		http.Redirect(w, r, "/login?error=1&next="+url.QueryEscape(next), http.StatusSeeOther)
		return
	}
	if err != nil {
		s.fail(w, r, nil, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Path: "/login", MaxAge: -1})
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: sess.Token, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.secure(r), MaxAge: int(access.SessionTTL.Seconds())})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the session (its CSRF token must match: no other site can
// sign a browser out).
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if s.cfg.AuthOff {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	sess, err := s.cfg.Access.Session(r.Context(), c.Value)
	if err == nil && subtle.ConstantTimeCompare([]byte(sess.CSRF), []byte(r.PostFormValue("csrf"))) != 1 {
		s.fail(w, r, nil, errCSRF)
		return
	}
	if err == nil {
		if err := s.cfg.Access.EndSession(r.Context(), c.Value); err != nil {
			s.fail(w, r, nil, err)
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.secure(r)})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
