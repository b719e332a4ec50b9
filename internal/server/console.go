package server

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/console"
	"github.com/zeish/zeish/internal/control"
)

// The web console: static files at /console/ (internal/console), and the
// public API again under /console/api/v1/… authenticated by a session cookie
// instead of a bearer key. A session is made by POST /console/api/session
// with an API key; the cookie is HttpOnly and SameSite=Strict, and every
// request that changes something must also carry X-Zeish-Console: 1, a
// header no cross-site form can send, from this origin (Origin and
// Sec-Fetch-Site, when the browser sends them, are checked too).

const (
	sessionCookie    = "zeish_session"
	sessionLifetime  = 12 * time.Hour
	consoleHeader    = "X-Zeish-Console"
	consoleMaxUpload = 32 << 20
	consoleAPIPrefix = "/console/api/v1/"
)

// consoleSessions live in memory: a zeishd restart signs everyone out. Each
// remembers the key it was opened with, so revoking the key ends it.
type consoleSessions struct {
	mu sync.Mutex
	m  map[string]consoleSession
}

type consoleSession struct {
	keyHash string
	expires time.Time
}

func (c *consoleSessions) get(id string, now time.Time) (consoleSession, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sess, ok := c.m[id]
	if ok && now.After(sess.expires) {
		delete(c.m, id)
		ok = false
	}
	return sess, ok
}

func (c *consoleSessions) put(id string, sess consoleSession) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]consoleSession{}
	}
	for k, v := range c.m { // expired ones go on the way
		if time.Now().After(v.expires) {
			delete(c.m, k)
		}
	}
	c.m[id] = sess
}

func (c *consoleSessions) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

func (s *Server) sessions() *consoleSessions { return &s.console }

// registerConsole adds the console's static files and its API proxy to mux.
func (s *Server) registerConsole(mux *http.ServeMux) {
	mux.Handle("GET /console/", console.Handler("/console/"))
	proxy := s.withSession(func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path = strings.TrimPrefix(r.URL.Path, "/console")
		r2.URL.RawPath = ""
		r2.Header.Del("Cookie")
		r2.Header.Del("Authorization")
		mux.ServeHTTP(w, r2)
	})
	// Per method: "GET /console/" would otherwise conflict with a method-less pattern.
	for _, m := range []string{"GET", "POST", "PUT", "DELETE"} {
		mux.HandleFunc(m+" "+consoleAPIPrefix, proxy)
	}
}

// sameSite refuses requests another site could have made the browser send.
func sameSite(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return fmt.Errorf("cross-site request (Sec-Fetch-Site: %s) refused: %w", site, errdefs.ErrForbidden)
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Errorf("cross-site request from origin %q refused: %w", origin, errdefs.ErrForbidden)
		}
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Header.Get(consoleHeader) != "1" {
		return fmt.Errorf("console request without the %s: 1 header refused (cross-site request?): %w", consoleHeader, errdefs.ErrForbidden)
	}
	return nil
}

// withSession authenticates the console cookie and puts its caller in the
// context, where withAccount finds it.
func (s *Server) withSession(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := sameSite(r); err != nil {
			writeError(w, r, err)
			return
		}
		c, err := r.Cookie(sessionCookie)
		if err != nil || c.Value == "" {
			writeError(w, r, fmt.Errorf("not signed in to the console: %w", errdefs.ErrUnauthenticated))
			return
		}
		sess, ok := s.sessions().get(c.Value, time.Now())
		if !ok {
			writeError(w, r, fmt.Errorf("the console session is not valid (expired, signed out or forged): sign in again: %w", errdefs.ErrUnauthenticated))
			return
		}
		who, err := s.ctl.AuthenticateHash(r.Context(), sess.keyHash)
		if err == nil {
			who, err = s.ctl.WithKey(r.Context(), who)
		}
		if err != nil {
			s.sessions().drop(c.Value)
			writeError(w, r, fmt.Errorf("the API key of this session was revoked: sign in again: %w", errdefs.ErrUnauthenticated))
			return
		}
		r = withCaller(r, who)
		h(w, r.WithContext(context.WithValue(r.Context(), consoleKey{}, true)))
	}
}

// ConsoleSession is the body of the session endpoints.
type consoleSignIn struct {
	APIKey string `json:"api_key"`
}

type consoleSessionView struct {
	Account api.Account `json:"account"`
	Plan    planView    `json:"plan"`
}

type planView struct {
	RunningSlots     int `json:"running_slots"`
	CreatesPerMinute int `json:"creates_per_minute"`
	DailyCreates     int `json:"daily_creates"`
}

func (s *Server) sessionView(who control.Caller) consoleSessionView {
	p := s.ctl.Plan()
	return consoleSessionView{Account: who.Account,
		Plan: planView{RunningSlots: p.RunningSlots, CreatesPerMinute: p.CreatesPerMinute, DailyCreates: p.DailyCreates}}
}

func (s *Server) signIn(w http.ResponseWriter, r *http.Request) {
	if err := sameSite(r); err != nil {
		writeError(w, r, err)
		return
	}
	var req consoleSignIn
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if !control.IsAPIKey(req.APIKey) {
		writeError(w, r, fmt.Errorf("that is not a zeish API key (they start with zk_): %w", errdefs.ErrUnauthenticated))
		return
	}
	hash := control.HashKey(req.APIKey)
	who, err := s.ctl.AuthenticateHash(r.Context(), hash)
	if err != nil {
		writeError(w, r, err)
		return
	}
	b := make([]byte, 32)
	rand.Read(b)
	id := base64.RawURLEncoding.EncodeToString(b)
	s.sessions().put(id, consoleSession{keyHash: hash, expires: time.Now().Add(sessionLifetime)})
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/console", MaxAge: int(sessionLifetime.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secureCookie(r)})
	writeJSON(w, http.StatusOK, s.sessionView(who))
}

// secureCookie says whether the session cookie is sent over https only:
// when the console is served over TLS, here or by a proxy in front
// (ZEISH_PUBLIC_URL https://…). The cookie carries no Domain, so it goes
// back only to the host that set it, never to a guest port's host name
// under it (guestorigin.go).
func (s *Server) secureCookie(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(strings.ToLower(s.opts.PublicURL), "https://")
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.sessionView(callerFrom(r.Context())))
}

func (s *Server) signOut(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sessions().drop(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/console", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secureCookie(r)})
	w.WriteHeader(http.StatusNoContent)
}

// consoleUpload is a file upload from the console, bounded (larger files
// belong to zeishd's data plane, `zeishctl files put`); it goes on to the
// data plane with a token minted for this one request.
func (s *Server) consoleUpload(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > consoleMaxUpload {
		writeError(w, r, invalid("upload of %.1f MiB is over the console's %d MiB limit; use `zeishctl files put` or an SDK",
			float64(r.ContentLength)/(1<<20), consoleMaxUpload>>20))
		return
	}
	who := callerFrom(r.Context())
	sb, err := s.ctl.Sandbox(r.Context(), who, r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	tok, _, err := s.ctl.Token(r.Context(), who, sb.ID, time.Minute)
	if err != nil {
		writeError(w, r, err)
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = api.DataPath + "/sandboxes/" + sb.ID + "/files"
	r2.URL.RawPath = ""
	r2.Header.Del("Cookie")
	r2.Header.Set("Authorization", "Bearer "+tok)
	r2.Body = http.MaxBytesReader(w, r.Body, consoleMaxUpload)
	if s.opts.Proxy != nil {
		// A control plane: the sandbox's node serves its data plane.
		s.opts.Proxy.ProxyToNode(w, r2, sb.Host, r2.URL.Path)
		return
	}
	s.withToken(s.writeFile)(w, r2)
}
