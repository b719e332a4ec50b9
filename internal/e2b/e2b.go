// Package e2b lets the unmodified E2B SDKs use zeish: it serves E2B's control
// plane (sandboxes, timeouts, pause and connect, with X-API-KEY auth mapped to
// zeish API keys) and, for every sandbox, a data plane compatible with E2B's
// in-sandbox agent envd (its Connect-RPC process and filesystem services,
// /files and /health) over zeish's own guest agent.
//
// The control plane is a translation: each E2B call becomes calls to zeish's
// public API, served in-process by the same handler every other client uses,
// so validation, quotas and errors stay in one place. The data plane is found
// by E2B's E2b-Sandbox-Id header (clients set E2B_SANDBOX_URL to
// <zeish>/e2b/envd), so no wildcard DNS is needed. docs/e2b-protocol.md
// describes the protocol and docs/e2b.md what is supported.
package e2b

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/e2b/envdpb/filesystem/filesystemconnect"
	"github.com/zeish/zeish/internal/e2b/envdpb/process/processconnect"
	"github.com/zeish/zeish/sandbox"
)

// Prefix is where zeishd mounts the facade: E2B_API_URL is <zeish>/e2b and
// E2B_SANDBOX_URL <zeish>/e2b/envd.
const Prefix = "/e2b"

// envdVersion is the envd version the facade claims: the SDK turns features
// on by it (0.4.0: no implicit user; 0.5.2: close stdin; 0.5.7: raw uploads).
// It stays below 0.6.2, which would promise file metadata.
const envdVersion = "0.5.7"

// tokenTTL is how long an envd access token from create or connect lasts,
// as long as the native API's longest (a token opens the sandbox's ports
// too); connecting again issues a fresh one.
const tokenTTL = time.Hour

// Backend is what the facade needs from zeish's server.
type Backend interface {
	// IssueToken signs a data-plane token for a sandbox, issued to the API
	// key apiKey (revoking the key ends the token).
	IssueToken(ctx context.Context, sandboxID, apiKey string, ttl time.Duration) (string, error)
	// SandboxAgent checks a token for a sandbox and returns its running
	// agent (errdefs.ErrUnavailable when the sandbox is gone or not
	// running) and the release of the call's slot in the data plane's
	// budget (errdefs.ClassRateLimited when it has none).
	SandboxAgent(ctx context.Context, id, token string) (*guest.Client, func(), error)
	// Authenticate checks an API key (errdefs.ErrUnauthenticated if bad).
	Authenticate(ctx context.Context, key string) (accountID string, err error)
}

// Templates says which templates exist (internal/catalog).
type Templates interface {
	Known(ctx context.Context, name string) error
}

// Options configure the facade.
type Options struct {
	// API serves zeish's public API (server.Handler); control-plane calls go
	// through it in-process.
	API       http.Handler
	Backend   Backend
	Templates Templates
	Logger    *slog.Logger
	// Domain, when set, also routes by host name as E2B's cloud does:
	// api.<Domain> is the control plane, 49983-<sandbox>.<Domain> envd.
	Domain string
	// Envd, when set, serves the envd routes (paths under Prefix+"/envd/",
	// the sandbox in the E2b-Sandbox-Id header) instead of the facade: a
	// control plane forwards them to the sandbox's node, whose own facade
	// serves them (EnvdHandler).
	Envd http.Handler
}

// Facade serves the E2B API.
type Facade struct {
	api      http.Handler
	backend  Backend
	tpls     Templates
	log      *slog.Logger
	domain   string
	envd     http.Handler
	procs    *processTable
	watchers *watcherTable
	defaults defaultUsers
}

// New makes a facade. Processes started through it run on when zeishd stops,
// like any guest process whose agent connection breaks.
func New(opts Options) *Facade {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Facade{api: opts.API, backend: opts.Backend, tpls: opts.Templates, log: opts.Logger, domain: strings.ToLower(opts.Domain), envd: opts.Envd,
		procs: newProcessTable(), watchers: newWatcherTable()}
}

// Routes lists the control-plane routes, as "METHOD /path".
func (f *Facade) Routes() []string {
	var out []string
	for _, r := range f.routes() {
		out = append(out, r.pattern)
	}
	return out
}

type route struct {
	pattern string
	handler http.HandlerFunc
}

func (f *Facade) routes() []route {
	const p = Prefix
	return []route{
		{"POST " + p + "/sandboxes", f.withKey(f.create)},
		{"POST " + p + "/v2/sandboxes", f.withKey(f.create)},
		{"GET " + p + "/sandboxes", f.withKey(f.listV1)},
		{"GET " + p + "/v2/sandboxes", f.withKey(f.listV2)},
		{"GET " + p + "/sandboxes/{id}", f.withKey(f.get)},
		{"DELETE " + p + "/sandboxes/{id}", f.withKey(f.kill)},
		{"GET " + p + "/sandboxes/{id}/metrics", f.withKey(f.metrics)},
		{"POST " + p + "/sandboxes/{id}/timeout", f.withKey(f.setTimeout)},
		{"POST " + p + "/sandboxes/{id}/refreshes", f.withKey(f.refresh)},
		{"POST " + p + "/sandboxes/{id}/pause", f.withKey(f.pause)},
		{"POST " + p + "/sandboxes/{id}/resume", f.withKey(f.resume)},
		{"POST " + p + "/v2/sandboxes/{id}/connect", f.withKey(f.connect)},
		{"POST " + p + "/sandboxes/{id}/fork", f.withKey(f.fork)},
		{"GET " + p + "/templates/aliases/{alias}", f.withKey(f.templateAlias)},
		{"POST " + p + "/sandboxes/{id}/snapshots", f.withKey(f.createSnapshot)},
		{"GET " + p + "/snapshots", f.withKey(f.listSnapshots)},
		{"DELETE " + p + "/templates/{id}", f.withKey(f.deleteTemplate)},
	}
}

// Handler serves everything under Prefix.
func (f *Facade) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, r := range f.routes() {
		mux.HandleFunc(r.pattern, r.handler)
	}
	if f.envd != nil {
		mux.Handle(Prefix+"/envd/", f.envd)
	} else {
		mux.Handle(Prefix+"/envd/", f.EnvdHandler())
	}
	mux.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such route: "+r.Method+" "+strings.TrimPrefix(r.URL.Path, Prefix))
	})
	return mux
}

// EnvdHandler serves envd for the sandboxes this process runs: paths
// under Prefix+"/envd/", the sandbox in the E2b-Sandbox-Id header, checked
// with its X-Access-Token. A node agent serves it alone.
func (f *Facade) EnvdHandler() http.Handler {
	envd := http.NewServeMux()
	envd.HandleFunc("GET /health", f.health)
	envd.HandleFunc("GET /files", f.readFile)
	envd.HandleFunc("POST /files", f.writeFile)
	envd.Handle(processconnect.NewProcessHandler(&processService{f: f}))
	envd.Handle(filesystemconnect.NewFilesystemHandler(&filesystemService{f: f}))
	return http.StripPrefix(Prefix+"/envd", f.withSandbox(envd))
}

// Mount serves the facade under Prefix, and by host name when a domain is
// set, and everything else with next (zeishd's API). A sandbox's host name
// for another port than envd's (what the SDK's getHost(port) names) goes to
// zeish's port proxy, as its path form.
func (f *Facade) Mount(next http.Handler) http.Handler {
	h := f.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch host, port := f.hostRoute(r.Host); {
		case host == "api":
			r = rewrite(r, Prefix+r.URL.Path)
		case host != "" && port != envdPort:
			next.ServeHTTP(w, portRequest(r, host, port))
			return
		case host != "":
			r = rewrite(r, Prefix+"/envd"+r.URL.Path)
			r.Header.Set("E2b-Sandbox-Id", host)
			r.Header.Set("E2b-Sandbox-Port", envdPort)
		case r.URL.Path == Prefix || strings.HasPrefix(r.URL.Path, Prefix+"/"):
		default:
			next.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// trafficTokenHeader carries the token of a sandbox's ports, as E2B's
// trafficAccessToken does for sandboxes without public traffic.
const trafficTokenHeader = "E2b-Traffic-Access-Token"

// portRequest turns a request for <port>-<sandbox>.<domain> into one for
// zeish's port proxy (/data/v1/sandboxes/{id}/ports/{port}/{path}). E2B's
// traffic token becomes zeish's bearer token, which the proxy checks and
// keeps from the guest; without one the port must be public.
func portRequest(r *http.Request, id, port string) *http.Request {
	r = rewrite(r, api.DataPath+"/sandboxes/"+id+"/ports/"+port+r.URL.Path)
	if tok := r.Header.Get(trafficTokenHeader); tok != "" {
		r.Header.Del(trafficTokenHeader)
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	return r
}

// hostRoute reads a host name under the domain: "api" for the control
// plane, a sandbox id and port for <port>-<sandbox>, "" for any other host.
func (f *Facade) hostRoute(host string) (string, string) {
	if f.domain == "" {
		return "", ""
	}
	if h, _, ok := strings.Cut(host, ":"); ok {
		host = h
	}
	sub, ok := strings.CutSuffix(strings.ToLower(host), "."+f.domain)
	if !ok {
		return "", ""
	}
	if sub == "api" {
		return "api", ""
	}
	port, id, ok := strings.Cut(sub, "-")
	if !ok || id == "" || strings.Contains(id, ".") {
		return "", ""
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return "", ""
	}
	// DNS names cannot hold "_": sbx-… stands for sbx_… (zeish's host form).
	if rest, ok := strings.CutPrefix(id, strings.TrimSuffix(sandbox.PrefixSandbox, "_")+"-"); ok {
		id = sandbox.PrefixSandbox + rest
	}
	return id, port
}

func rewrite(r *http.Request, path string) *http.Request {
	r2 := r.Clone(r.Context())
	r2.URL.Path, r2.URL.RawPath = path, ""
	return r2
}
