package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/server"
	"github.com/zeish/zeish/internal/store"
)

// ProxyToNode sends a data-plane request (a guest port's HTTP, WebSocket or
// raw TCP, a console upload) to the data plane of node nodeID at path. The
// caller's token goes along and no credential of the control plane's: the
// node verifies the token offline, as for any data-plane call. This stays
// a proxy, not a call of the node protocol: the bytes are the caller's and
// the guest's (upgrades, raw TCP), and the control plane adds no authority
// to them that a typed call would need to carry.
func (r *Router) ProxyToNode(w http.ResponseWriter, req *http.Request, nodeID, path string) {
	n, base, err := r.nodeAt(req.Context(), nodeID, "")
	if err != nil {
		server.WriteError(w, req, err)
		return
	}
	r.proxy(unavailable(n), func(pr *httputil.ProxyRequest) {
		pr.Out.URL.Scheme, pr.Out.URL.Host = base.Scheme, base.Host
		pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
		pr.Out.Host = pr.In.Host // the guest's server sees the name it was called by
		pr.SetXForwarded()
	}).ServeHTTP(w, req)
}

// EnvdHandler forwards E2B's envd calls (internal/e2b: the sandbox in the
// E2b-Sandbox-Id header) to the node of that sandbox, which checks their
// access token itself and serves them from its own facade. Streams are
// flushed as they come (a command's output, a watch).
func (r *Router) EnvdHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		envdErr := func(status int, msg string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			json.NewEncoder(w).Encode(map[string]any{"code": status, "message": msg})
		}
		id := req.Header.Get("E2b-Sandbox-Id")
		rec, err := r.o.Store.GetSandbox(req.Context(), id)
		if id == "" || err != nil {
			// As the node's facade answers a sandbox that is gone.
			envdErr(http.StatusBadGateway, fmt.Sprintf("sandbox %q not found", id))
			return
		}
		n, _, err := r.node(req.Context(), rec.Host)
		if err != nil {
			envdErr(http.StatusBadGateway, err.Error())
			return
		}
		base, err := url.Parse(strings.TrimSuffix(n.URL, "/"))
		if err != nil {
			envdErr(http.StatusBadGateway, "node "+n.ID+" has a bad url")
			return
		}
		fail := func(w http.ResponseWriter, req *http.Request, err error) {
			envdErr(http.StatusBadGateway, fmt.Sprintf("node %s of sandbox %s: %v", n.ID, id, err))
		}
		r.proxy(fail, func(pr *httputil.ProxyRequest) {
			pr.SetURL(base)
			pr.Out.URL.Path, pr.Out.URL.RawPath = pr.In.URL.Path, ""
			pr.SetXForwarded()
		}).ServeHTTP(w, req)
	})
}

// nodeAt is registered node id and its URL with suffix appended.
func (r *Router) nodeAt(ctx context.Context, id, suffix string) (store.NodeRecord, *url.URL, error) {
	n, _, err := r.node(ctx, id)
	if err != nil {
		return n, nil, err
	}
	base, err := url.Parse(strings.TrimSuffix(n.URL, "/") + suffix)
	if err != nil {
		return n, nil, fmt.Errorf("node %s has a bad url %q: %w", n.ID, n.URL, errdefs.ErrUnavailable)
	}
	return n, base, nil
}

// proxy is how a replica passes a request to a node: over the cluster's
// transport, streamed both ways as it comes (a build log, a command's
// output, a guest's server), rewritten by rewrite; fail answers when the
// node does not.
func (r *Router) proxy(fail func(http.ResponseWriter, *http.Request, error), rewrite func(*httputil.ProxyRequest)) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{Transport: r.o.Proxy, FlushInterval: -1, Rewrite: rewrite, ErrorHandler: fail}
}

// unavailable answers a request node n did not: 503 unavailable.
func unavailable(n store.NodeRecord) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, req *http.Request, err error) {
		server.WriteError(w, req, fmt.Errorf("node %s: %v: %w", n.ID, err, errdefs.ErrUnavailable))
	}
}

// buildNode is the node a new template is built on (BuildOn).
func (r *Router) buildNode(ctx context.Context) (store.NodeRecord, error) {
	nodes, err := r.Nodes(ctx)
	if err != nil {
		return store.NodeRecord{}, fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err)
	}
	return BuildOn(nodes, time.Now(), r.o.LostAfter)
}
