package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/sandbox"
)

// A sandbox's browser (Chromium with the DevTools protocol on guest port
// sandbox.BrowserPort) is reached through …/sandboxes/{id}/browser/{path}
// on the data plane rather than the generic port proxy, because Chromium
// answers only requests whose Host is an IP address or localhost (its guard
// against DNS rebinding), refuses WebSockets with a foreign Origin, and
// writes its own address into the URLs it lists. This proxy sends the
// guest's address as Host, drops Origin once the token is checked, and
// rewrites the listed URLs to lead through itself. CDP clients cannot all
// send headers, so the token may come in the query (?token=).

// getBrowser is GET /public/sandboxes/{id}/browser.
func (s *Server) getBrowser(w http.ResponseWriter, r *http.Request) {
	ttl := 0
	if v := r.URL.Query().Get("ttl_seconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, r, invalid("ttl_seconds must be within 1..%d", int(control.MaxTokenTTL.Seconds())))
			return
		}
		ttl = n
	}
	g, err := s.ctl.Browser(r.Context(), callerFrom(r.Context()), r.PathValue("id"), ttl)
	if err != nil {
		writeError(w, r, err)
		return
	}
	base, err := s.ctl.DataURL(r.Context(), g.Sandbox, s.publicURL(r)+api.DataPath)
	if err != nil {
		writeError(w, r, err)
		return
	}
	base += "/browser"
	v := g.Version
	cdp, err := viaProxy(v.WebSocketURL, wsScheme(base), g.Token)
	if err != nil {
		writeError(w, r, fmt.Errorf("the browser of sandbox %s: %v: %w", g.ID, err, errdefs.ErrUnavailable))
		return
	}
	writeJSON(w, http.StatusOK, api.Browser{
		CDPURL: cdp, HTTPURL: base, Token: g.Token, ExpiresAt: g.ExpiresAt,
		Version: v.Browser, ProtocolVersion: v.ProtocolVersion, UserAgent: v.UserAgent,
	})
}

// browserBase is the data-plane URL the browser's endpoints hang under.
func (s *Server) browserBase(r *http.Request, id string) string {
	return s.publicURL(r) + api.DataPath + "/sandboxes/" + id + "/browser"
}

func wsScheme(u string) string {
	if rest, ok := strings.CutPrefix(u, "https://"); ok {
		return "wss://" + rest
	}
	return "ws://" + strings.TrimPrefix(u, "http://")
}

// viaProxy turns a WebSocket URL Chromium listed (ws://<guest>/devtools/…)
// into one through the data plane under base, with tok in the query if
// given. The guest wrote it: a path that climbs out of /devtools/ (dot
// segments) is refused, and the path goes out escaped, so none of it
// reads as a query or a fragment.
func viaProxy(chromeURL, base, tok string) (string, error) {
	u, err := url.Parse(chromeURL)
	if err != nil || !strings.HasPrefix(u.Path, "/devtools/") || path.Clean(u.Path) != u.Path {
		return "", fmt.Errorf("unexpected DevTools URL %q", chromeURL)
	}
	out := base + (&url.URL{Path: u.Path}).EscapedPath()
	if tok != "" {
		out += "?token=" + url.QueryEscape(tok)
	}
	return out, nil
}

// browserProxy is …/sandboxes/{id}/browser/{path...} on the data plane.
func (s *Server) browserProxy(w http.ResponseWriter, r *http.Request) {
	// CDP clients cannot all send headers: the token may come in ?token=.
	tok, inQuery := token(r), false
	if tok == "" {
		tok, inQuery = r.URL.Query().Get("token"), true
	}
	t, err := s.ctl.BrowserAccess(r.Context(), tok, r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	release, err := s.ctl.Hold(t)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer release()
	// Whatever listens on the browser's port is the guest's: never
	// content of zeishd's origin (guestorigin.go).
	w = &guestWriter{ResponseWriter: w}
	addr, err := s.ctl.PortAddr(t, sandbox.BrowserPort)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if !inQuery {
		tok = "" // the URLs it lists carry a query token on, not a header's
	}
	base := wsScheme(s.browserBase(r, t.ID))
	path := "/" + r.PathValue("path")
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", addr
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			q := pr.Out.URL.Query()
			q.Del("token")
			pr.Out.URL.RawQuery = q.Encode()
			pr.Out.Host = addr // an IP: Chromium refuses other Host names
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Origin") // checked here by the token, not by Chromium's allow-list
			pr.Out.Header.Del("Cookie")
		},
		Transport: s.browser,
		ModifyResponse: func(resp *http.Response) error {
			filterGuestHeaders(resp.Header, false, "")
			if !strings.HasPrefix(path, "/json") || !strings.Contains(resp.Header.Get("Content-Type"), "json") {
				return nil
			}
			return rewriteDevToolsJSON(resp, base, tok)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, r, portError(sandbox.BrowserPort, t.ID, s.data, err))
		},
	}
	rp.ServeHTTP(w, r)
}

// rewriteDevToolsJSON makes the WebSocket URLs of a /json answer (one
// target, or a list) lead through the data plane, and drops the frontend
// URLs, which name the guest's address.
func rewriteDevToolsJSON(resp *http.Response, base, tok string) error {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	resp.Body.Close()
	if err != nil {
		return err
	}
	var doc any
	if json.Unmarshal(body, &doc) == nil {
		fix := func(m map[string]any) {
			if ws, ok := m["webSocketDebuggerUrl"].(string); ok {
				if u, err := viaProxy(ws, base, tok); err == nil {
					m["webSocketDebuggerUrl"] = u
				} else {
					delete(m, "webSocketDebuggerUrl")
				}
			}
			delete(m, "devtoolsFrontendUrl")
			delete(m, "devtoolsFrontendUrlCompat")
		}
		switch d := doc.(type) {
		case map[string]any:
			fix(d)
		case []any:
			for _, e := range d {
				if m, ok := e.(map[string]any); ok {
					fix(m)
				}
			}
		}
		if b, err := json.Marshal(doc); err == nil {
			body = b
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}
