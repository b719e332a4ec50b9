package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
)

// The public endpoints that read a sandbox's guest (its listening ports,
// its git clone, its browser and desktop) need the guest's agent, which
// only the sandbox's node can reach; a template build needs a node to build
// on and keep the files. On a control plane they are forwarded to that
// node, which serves them with the same handlers: answers and errors (with
// their codes) are the node's own.

// NodeForwarder is a control plane's way to its nodes (the cluster
// package's Router): it sends r to node nodeID, on behalf of the account
// and API key named, and copies the answer back (streamed both ways).
type NodeForwarder interface {
	ForwardToNode(w http.ResponseWriter, r *http.Request, nodeID string, f Forwarded)
	// ProxyToNode sends a data-plane request to node nodeID's data plane
	// at path, headers (the caller's token) and upgrades kept: the node
	// checks the token itself.
	ProxyToNode(w http.ResponseWriter, r *http.Request, nodeID, path string)
	// BuildNode is the node a new template is built on.
	BuildNode(ctx context.Context) (string, error)
}

// Forwarded is who a forwarded request acts for: the control plane
// authenticated them; the node trusts it on the node token.
type Forwarded struct {
	AccountID string
	KeyID     string
}

// Headers of a forwarded request (with the node token as its bearer).
const (
	ForwardAccountHeader = "Zeish-Forward-Account"
	ForwardKeyHeader     = "Zeish-Forward-Key"
)

// nodeRoute is a public endpoint served on a node, and which node: ""
// serves it here (a template no node holds, e.g. a built-in).
type nodeRoute struct {
	route
	node func(s *Server, fw NodeForwarder, r *http.Request) (string, error)
}

func sandboxNode(s *Server, _ NodeForwarder, r *http.Request) (string, error) {
	sb, err := s.ctl.Sandbox(r.Context(), callerFrom(r.Context()), r.PathValue("id"))
	if err != nil {
		return "", err
	}
	return sb.Host, nil
}

func templateNode(s *Server, _ NodeForwarder, r *http.Request) (string, error) {
	t, err := s.ctl.Template(r.Context(), callerFrom(r.Context()), r.PathValue("id"))
	if err != nil {
		return "", err
	}
	return t.Host, nil
}

func buildNode(_ *Server, fw NodeForwarder, r *http.Request) (string, error) {
	return fw.BuildNode(r.Context())
}

// nodeRoutes are the public endpoints served where the guest or the
// template's files are.
func (s *Server) nodeRoutes() []nodeRoute {
	const p = api.BasePath + "/public"
	return []nodeRoute{
		{route{"GET " + p + "/sandboxes/{id}/ports", s.listPorts}, sandboxNode},
		{route{"GET " + p + "/sandboxes/{id}/browser", s.getBrowser}, sandboxNode},
		{route{"GET " + p + "/sandboxes/{id}/git", s.gitStatus}, sandboxNode},
		{route{"GET " + p + "/sandboxes/{id}/desktop", s.desktopStatus}, sandboxNode},
		{route{"POST " + p + "/templates", s.createTemplate}, buildNode},
		{route{"DELETE " + p + "/templates/{id}", s.deleteTemplate}, templateNode},
		{route{"GET " + p + "/templates/{id}/events", s.templateEvents}, templateNode},
	}
}

// onNode serves rt here on a single zeishd, and on its node when this
// server's node is a control plane's NodeForwarder.
func (s *Server) onNode(rt nodeRoute) http.HandlerFunc {
	fw := s.opts.Forwarder
	if fw == nil {
		return rt.handler
	}
	return func(w http.ResponseWriter, r *http.Request) {
		node, err := rt.node(s, fw, r)
		if err != nil {
			writeError(w, r, err)
			return
		}
		if node == "" {
			rt.handler(w, r)
			return
		}
		who := callerFrom(r.Context())
		f := Forwarded{AccountID: who.Account.ID}
		if id, err := s.ctl.KeyID(r.Context(), who); err == nil {
			f.KeyID = id
		}
		fw.ForwardToNode(w, r, node, f)
	}
}

// ForwardedHandler serves, on a node agent, the node routes a control
// plane forwarded to it (paths under the public API's, as the control
// plane got them). trusted checks the request came from the control plane
// (the node token); the account it names is then the caller.
func (s *Server) ForwardedHandler(trusted func(*http.Request) error) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.nodeRoutes() {
		mux.HandleFunc(rt.pattern, s.withAccount(rt.handler))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, &routeError{route: r.Method + " " + r.URL.Path})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := trusted(r); err != nil {
			writeError(w, r, fmt.Errorf("a forwarded request without the node token: %w", errdefs.ErrUnauthenticated))
			return
		}
		who, err := s.ctl.Forwarded(r.Context(), r.Header.Get(ForwardAccountHeader), r.Header.Get(ForwardKeyHeader))
		if err != nil {
			writeError(w, r, err)
			return
		}
		r.Header.Del("Authorization") // the node token is not the caller's
		mux.ServeHTTP(w, withCaller(r, who))
	})
}

// WriteError answers err with its status and stable code, as every
// handler of this package does (for handlers outside it, e.g. a forward).
func WriteError(w http.ResponseWriter, r *http.Request, err error) { writeError(w, r, err) }

// proxyData sends a data-plane request (its token set) to target, the
// sandbox's data plane on its node, and streams the answer back.
func proxyData(w http.ResponseWriter, r *http.Request, target string) {
	u, err := url.Parse(target)
	if err != nil {
		writeError(w, r, fmt.Errorf("data plane url %q: %w", target, errdefs.ErrUnavailable))
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = u.Scheme, u.Host
			pr.Out.URL.Path, pr.Out.URL.RawPath = u.Path, ""
			pr.Out.Host = u.Host
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, r, fmt.Errorf("data plane at %s: %v: %w", u.Host, err, errdefs.ErrUnavailable))
		},
	}
	rp.ServeHTTP(w, r)
}
