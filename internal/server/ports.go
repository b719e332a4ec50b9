package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
)

// Guest ports are reached through the data plane: HTTP and WebSocket by a
// reverse proxy (…/ports/{port}/{path}, or the Host P-<id>.<domain>), raw
// TCP as a WebSocket (…/tcp/{port}). Each needs the sandbox's data-plane
// token, unless the owner opened the port to the public. The host form is
// the port's own origin; the path form is zeishd's, where a guest's
// answers are sandboxed (guestorigin.go). Every request and forward holds
// a slot of the data plane's budget (calllimit.go) and is bounded in time
// (guestconn.go).

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, invalid("port %q: want 1..65535", s)
	}
	return p, nil
}

// guestPort reads the port of a data-plane request. A bad one is refused
// only after the credential is checked: who may not ask learns nothing.
func (s *Server) guestPort(w http.ResponseWriter, r *http.Request) (int, bool) {
	port, err := parsePort(r.PathValue("port"))
	if err != nil {
		if _, _, aerr := s.ctl.PortAccess(r.Context(), token(r), r.PathValue("id"), 0); aerr != nil {
			err = aerr
		}
		writeError(w, r, err)
		return 0, false
	}
	return port, true
}

func (s *Server) portProxy(w http.ResponseWriter, r *http.Request) {
	port, ok := s.guestPort(w, r)
	if !ok {
		return
	}
	s.proxy(w, r, r.PathValue("id"), port, "/"+r.PathValue("path"))
}

func (s *Server) proxy(w http.ResponseWriter, r *http.Request, id string, port int, path string) {
	w, r = asStream(w, r, s.data.Idle) // by host name, the HTTP server may have taken it for a control-plane call
	t, withToken, err := s.ctl.PortAccess(r.Context(), token(r), id, port)
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
	own := s.ownOrigin(r, t.ID, port)
	w = &guestWriter{ResponseWriter: w, own: own, host: r.Host}
	if s.onOtherNode(w, r, t.Host, fmt.Sprintf("%s/sandboxes/%s/ports/%d%s", api.DataPath, t.ID, port, path)) {
		return
	}
	addr, err := s.ctl.PortAddr(t, port)
	if err != nil {
		writeError(w, r, err)
		return
	}
	rp := &httputil.ReverseProxy{
		Transport: s.ports,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", addr
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			pr.Out.Host = pr.In.Host
			if withToken {
				pr.Out.Header.Del("Authorization") // the token is ours, never the guest's
			}
			stripZeishCookies(pr.Out.Header)
			pr.SetXForwarded()
		},
		// A WebSocket's 101 goes out without passing guestWriter.
		ModifyResponse: func(resp *http.Response) error {
			filterGuestHeaders(resp.Header, own, r.Host)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, r, portError(port, t.ID, s.data, err))
		},
	}
	rp.ServeHTTP(w, r)
}

// onOtherNode hands a request for a guest port to the data plane of the
// sandbox's node when this server is a control plane (the guest is only
// reachable from there): path-form and host-form port URLs, E2B's port
// hosts and raw TCP all work through a replica. It reports whether it did.
func (s *Server) onOtherNode(w http.ResponseWriter, r *http.Request, node, path string) bool {
	if s.opts.Proxy == nil {
		return false
	}
	s.opts.Proxy.ProxyToNode(w, r, node, path)
	return true
}

// byHost serves P-<id>.<domain> from the guest's port P, for the public
// domain and for localhost (guestorigin.go), everything else from next.
func (s *Server) byHost(next http.Handler) http.Handler {
	var suffixes []string
	for _, d := range s.servedDomains() {
		suffixes = append(suffixes, "."+strings.ToLower(d))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, suffix := range suffixes {
			p, id, ok := hostPort(r.Host, suffix)
			if !ok {
				continue
			}
			if strings.HasPrefix(r.URL.Path, api.DataPath+"/sandboxes/"+id+"/") {
				// A control plane handed this host-form request to the
				// sandbox's node in the path form (onOtherNode), Host
				// kept: the path names the port.
				break
			}
			port, err := parsePort(p)
			if err != nil {
				writeError(w, r, err)
				return
			}
			s.proxy(w, r, id, port, r.URL.Path)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// IsHostPort reports whether r is for a guest port by host name
// (P-<id>.<domain> of a domain byHost serves): a data-plane stream
// (Limits.Streams).
func (s *Server) IsHostPort(r *http.Request) bool {
	for _, d := range s.servedDomains() {
		if _, _, ok := hostPort(r.Host, "."+strings.ToLower(d)); ok {
			return true
		}
	}
	return false
}

// hostPort splits a host name of the form P-<id><suffix> (any case, with
// or without a :port) into P and the sandbox id; ok is false for any other
// name. DNS names cannot hold "_": sbx-… in the name stands for sbx_….
func hostPort(host, suffix string) (port, id string, ok bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, ok := strings.CutSuffix(strings.ToLower(host), suffix)
	if !ok || strings.Contains(label, ".") {
		return "", "", false
	}
	port, id, ok = strings.Cut(label, "-")
	if !ok {
		return "", "", false
	}
	if rest, ok := strings.CutPrefix(id, strings.TrimSuffix(sandbox.PrefixSandbox, "_")+"-"); ok {
		id = sandbox.PrefixSandbox + rest
	}
	return port, id, true
}

// tcpPort carries raw TCP to a guest port inside a WebSocket (binary
// messages), for `zeishctl ports forward`.
func (s *Server) tcpPort(w http.ResponseWriter, r *http.Request) {
	port, ok := s.guestPort(w, r)
	if !ok {
		return
	}
	t, _, err := s.ctl.PortAccess(r.Context(), token(r), r.PathValue("id"), port)
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
	if s.onOtherNode(w, r, t.Host, r.URL.Path) {
		return
	}
	addr, err := s.ctl.PortAddr(t, port)
	if err != nil {
		writeError(w, r, err)
		return
	}
	up, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(r.Context(), "tcp", addr)
	if err != nil {
		writeError(w, r, portError(port, t.ID, s.data, err))
		return
	}
	up = closeWhenIdle(up, s.data.Idle)
	defer up.Close()
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered the client
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	c := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	defer c.Close()
	Splice(c, up)
}

// setPort is POST /public/sandboxes/{id}/ports.
func (s *Server) setPort(w http.ResponseWriter, r *http.Request) {
	var req api.PortRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	sb, err := s.ctl.SetPort(r.Context(), callerFrom(r.Context()), r.PathValue("id"), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.portInfo(r, s.publicURL(r)+api.DataPath+"/sandboxes/"+sb.ID, sb, req.Port))
}

// portInfo is port of sandbox sb, whose data plane is at base, as the
// client of r is told of it.
func (s *Server) portInfo(r *http.Request, base string, sb sandbox.Sandbox, port int) api.Port {
	out := api.Port{Port: port, Public: slices.Contains(sb.PublicPorts, port),
		URL: fmt.Sprintf("%s/ports/%d/", base, port), TCPURL: fmt.Sprintf("%s/tcp/%d", base, port)}
	out.TCPURL = "ws" + strings.TrimPrefix(out.TCPURL, "http")
	if s.opts.PublicDomain != "" {
		out.Host = portHostName(sb.ID, port, s.opts.PublicDomain)
	}
	out.BrowserURL = s.browserURL(r, sb.ID, port)
	return out
}

// listPorts answers the guest's listening TCP ports and the ports opened
// to the public, listening or not.
func (s *Server) listPorts(w http.ResponseWriter, r *http.Request) {
	sb, listening, err := s.ctl.Ports(r.Context(), callerFrom(r.Context()), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	base, err := s.ctl.DataURL(r.Context(), sb, s.publicURL(r)+api.DataPath)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := api.PortList{Ports: []api.ListedPort{}}
	seen := map[int]bool{}
	for _, l := range listening {
		seen[l.Port] = true
		out.Ports = append(out.Ports, api.ListedPort{Port: s.portInfo(r, base, sb, l.Port), Listening: true, Loopback: l.Loopback})
	}
	for _, p := range sb.PublicPorts {
		if !seen[p] {
			out.Ports = append(out.Ports, api.ListedPort{Port: s.portInfo(r, base, sb, p)})
		}
	}
	slices.SortFunc(out.Ports, func(a, b api.ListedPort) int { return a.Port.Port - b.Port.Port })
	writeJSON(w, http.StatusOK, out)
}
