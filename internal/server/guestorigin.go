package server

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Guest content never runs on zeishd's own origin, where the console and
// its session cookie live (SECURITY.md, "Guest content"). A guest port has
// an origin of its own: the host form <port>-<id>.<domain>, under
// ZEISH_PUBLIC_DOMAIN or, with none, under "localhost" (browsers resolve
// every *.localhost name to the loopback address, and each such name is a
// site of its own). The path form …/ports/{port}/… is served on zeishd's
// origin for programs; a browser that opens it gets the guest's pages in a
// sandbox (an opaque origin: no cookies, no storage, every request
// cross-site) and none of the guest's cookies.

// localDomain is the domain of the host form when the server has no
// public domain: a loopback name in every browser.
const localDomain = "localhost"

// guestSandboxCSP turns a response of the path form into an opaque origin.
// Scripts may run (a guest's page works as far as it can without cookies
// or storage) but never as zeishd's origin; allow-same-origin is never in
// it.
const guestSandboxCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// portHostName is port's host name under domain: <port>-<id>.<domain>, the
// id's "_" written "-" (DNS names cannot hold "_").
func portHostName(id string, port int, domain string) string {
	return fmt.Sprintf("%d-%s.%s", port, strings.Replace(id, "_", "-", 1), strings.TrimPrefix(domain, "."))
}

// servedDomains are the domains whose host names byHost serves itself.
func (s *Server) servedDomains() []string {
	out := []string{localDomain}
	if d := strings.TrimPrefix(s.opts.PublicDomain, "."); d != "" && !strings.EqualFold(d, localDomain) {
		out = append(out, d)
	}
	return out
}

// ownOrigin reports whether the browser addressed r to port of sandbox id
// by that port's own host name (under a domain byHost serves or a front
// end's, such as E2B's): then the guest's page runs on its own origin. A
// host name of another port or sandbox, or zeishd's, is not.
func (s *Server) ownOrigin(r *http.Request, id string, port int) bool {
	for _, d := range append(s.servedDomains(), s.opts.GuestDomains...) {
		if d = strings.TrimPrefix(d, "."); d == "" {
			continue
		}
		p, hid, ok := hostPort(r.Host, "."+strings.ToLower(d))
		if ok && hid == id && p == strconv.Itoa(port) {
			return true
		}
	}
	return false
}

// filterGuestHeaders makes a guest's response headers safe for the origin
// a browser sees them on. On the port's own origin (own) the guest keeps
// its headers, but not a cookie for a wider domain than its host (which
// could land on zeishd's name, a parent of it) nor one in the name of the
// console's session. On zeishd's origin it gets the sandbox policy and no
// way to touch the origin's state: no cookies, no Clear-Site-Data, no
// service-worker scope. It may run more than once on the same headers.
func filterGuestHeaders(h http.Header, own bool, host string) {
	if !own {
		h.Del("Set-Cookie")
		h.Del("Clear-Site-Data")
		h.Del("Service-Worker-Allowed")
		if !slices.Contains(h.Values("Content-Security-Policy"), guestSandboxCSP) {
			h.Add("Content-Security-Policy", guestSandboxCSP)
		}
		h.Set("X-Content-Type-Options", "nosniff")
		return
	}
	var kept []string
	for _, c := range h.Values("Set-Cookie") {
		if ownCookie(c, host) {
			kept = append(kept, c)
		}
	}
	h.Del("Set-Cookie")
	for _, c := range kept {
		h.Add("Set-Cookie", c)
	}
}

// ownCookie reports whether a guest's Set-Cookie value may stand on its own
// origin host: not the console's cookie, and no Domain but host itself.
// Attributes are read as browsers read them (the last Domain counts, an
// empty one is none), leniently: anything that looks like a Domain for
// another name drops the cookie.
func ownCookie(setCookie, host string) bool {
	host = strings.ToLower(hostOnly(host))
	parts := strings.Split(setCookie, ";")
	name, _, _ := strings.Cut(parts[0], "=")
	if strings.EqualFold(strings.TrimSpace(name), sessionCookie) {
		return false
	}
	for _, attr := range parts[1:] {
		k, v, _ := strings.Cut(attr, "=")
		if !strings.EqualFold(strings.TrimSpace(k), "domain") {
			continue
		}
		v = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(v), "."))
		if v != "" && v != host {
			return false
		}
	}
	return true
}

// hostOnly is a Host header without its port.
func hostOnly(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}

// stripZeishCookies removes zeish's own cookies from a request on its way
// to a guest: the console's session is no guest's business, whichever way
// the browser came to send it.
func stripZeishCookies(h http.Header) {
	lines := h.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	var kept []string
	for _, line := range lines {
		for _, c := range strings.Split(line, ";") {
			name, _, _ := strings.Cut(c, "=")
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(strings.TrimSpace(name), sessionCookie) {
				kept = append(kept, c)
			}
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}

// guestWriter applies filterGuestHeaders to every response that passes
// (the guest's, or a node's answer on its behalf).
type guestWriter struct {
	http.ResponseWriter
	own  bool
	host string
}

func (g *guestWriter) WriteHeader(code int) {
	filterGuestHeaders(g.Header(), g.own, g.host)
	g.ResponseWriter.WriteHeader(code)
}

func (g *guestWriter) Write(p []byte) (int, error) {
	filterGuestHeaders(g.Header(), g.own, g.host)
	return g.ResponseWriter.Write(p)
}

func (g *guestWriter) Flush() {
	if f, ok := g.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (g *guestWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// browserURL is where a browser opens port of sandbox id on an origin of
// its own (api.Port.BrowserURL): the host form under the public domain,
// or under "localhost" when the server is reached on a loopback address;
// scheme and port are the data plane's. "" when neither applies: a
// browser on another machine needs ZEISH_PUBLIC_DOMAIN (a wildcard name).
func (s *Server) browserURL(r *http.Request, id string, port int) string {
	base, err := url.Parse(s.publicURL(r))
	if err != nil || base.Host == "" {
		return ""
	}
	domain := strings.TrimPrefix(s.opts.PublicDomain, ".")
	if domain == "" {
		if !loopbackName(base.Hostname()) {
			return ""
		}
		domain = localDomain
	}
	host := portHostName(id, port, domain)
	if p := base.Port(); p != "" {
		host = net.JoinHostPort(host, p)
	}
	return base.Scheme + "://" + host + "/"
}

// loopbackName reports whether host is a loopback address or name.
func loopbackName(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return host == localDomain || strings.HasSuffix(host, "."+localDomain)
}
