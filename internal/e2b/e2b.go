// Package e2b lets the unmodified E2B SDKs use zeish: it serves E2B's control
// plane (sandboxes, timeouts, pause and connect, with X-API-KEY auth mapped to
// zeish API keys) and, for every sandbox, a data plane compatible with E2B's
// in-sandbox agent envd (its Connect-RPC process and filesystem services,
// /files and /health) over zeish's own guest agent.
//
// The control plane is a translation: each E2B call becomes calls to zeish's
// application (internal/control), as every other front end's, so
// validation, quotas and errors stay in one place. The data plane is found
// by E2B's E2b-Sandbox-Id header (clients set E2B_SANDBOX_URL to
// <zeish>/e2b/envd), so no wildcard DNS is needed. docs/e2b-protocol.md
// describes the protocol and docs/e2b.md what is supported.
package e2b

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/internal/e2b/envdpb/filesystem/filesystemconnect"
	"github.com/zeish/zeish/internal/e2b/envdpb/process/processconnect"
	"github.com/zeish/zeish/sandbox"
)

// Prefix is where zeishd mounts the facade: E2B_API_URL is <zeish>/e2b and
// E2B_SANDBOX_URL <zeish>/e2b/envd.
const Prefix = "/e2b"

// envdVersion is the envd version the facade claims: the SDK turns features
// on by it (0.4.0: no implicit user; 0.5.2: close stdin; 0.5.7: raw
// uploads; 0.6.2: file metadata; 0.6.3: entries in watch events; 0.6.4:
// watching network mounts, which a zeish guest has none of). Every feature up
// to it is served, and no SDK from 2.40 to 2.51 gates anything on a later
// one; envd's later versions changed nothing a client sees.
const envdVersion = "0.6.4"

// tokenTTL is how long an envd access token from create or connect lasts,
// as long as the native API's longest (a token opens the sandbox's ports
// too); connecting again issues a fresh one.
const tokenTTL = time.Hour

// App is what the facade needs of zeish's application (internal/control's
// *Control): E2B's calls become these.
type App interface {
	Authenticate(ctx context.Context, key string) (control.Caller, error)
	Create(ctx context.Context, who control.Caller, req api.CreateSandboxRequest) (sandbox.Sandbox, error)
	Sandbox(ctx context.Context, who control.Caller, ref string) (sandbox.Sandbox, error)
	List(ctx context.Context, who control.Caller, f control.ListFilter) (api.SandboxList, error)
	Delete(ctx context.Context, who control.Caller, ref string) (sandbox.Sandbox, error)
	Lifecycle(ctx context.Context, who control.Caller, op sandbox.Op, ref string) (sandbox.Sandbox, error)
	Wake(ctx context.Context, who control.Caller, ref string) (sandbox.Sandbox, bool, error)
	SetTimeout(ctx context.Context, who control.Caller, ref string, req api.TimeoutRequest) (sandbox.Sandbox, error)
	Settled(ctx context.Context, sb sandbox.Sandbox) (sandbox.Sandbox, error)
	SettledAll(ctx context.Context, sbs []sandbox.Sandbox) ([]sandbox.Sandbox, error)
	Clone(ctx context.Context, who control.Caller, ref string, req api.CloneRequest) (api.CloneResponse, error)
	CloneSnapshot(ctx context.Context, who control.Caller, ref, snapRef string, req api.CloneRequest) (api.CloneResponse, error)
	CreateSnapshot(ctx context.Context, who control.Caller, ref string, req api.CreateSnapshotRequest) (sandbox.Snapshot, error)
	Snapshots(ctx context.Context, who control.Caller, ref string) (api.SnapshotList, error)
	Snapshot(ctx context.Context, who control.Caller, ref control.SnapshotRef) (sandbox.Snapshot, error)
	DeleteSnapshot(ctx context.Context, who control.Caller, ref control.SnapshotRef) error
	// TemplateKnown answers for the caller's own templates and the
	// built-ins only: another account's are unknown.
	TemplateKnown(ctx context.Context, who control.Caller, name string) error
	// TokenUntil signs a data-plane token of a sandbox of the caller's,
	// issued to the caller's API key (revoking the key ends the token), that
	// expires at exp (on the grid of sign.go; never more than an hour
	// away).
	TokenUntil(ctx context.Context, who control.Caller, id string, exp time.Time) (string, error)
	// SandboxTokens lists the tokens of a sandbox that expire at one of
	// exps, for checking signed URLs (sign.go); errdefs.ErrNotFound when
	// there is no such sandbox.
	SandboxTokens(ctx context.Context, id string, exps []time.Time) ([]string, error)
	// CheckToken checks a token of a sandbox in whatever state it is
	// (errdefs.ErrUnauthenticated if bad, errdefs.ErrNotFound when there
	// is no such sandbox).
	CheckToken(ctx context.Context, id, token string) error
	// OpenEnvd checks a token for a sandbox and returns its running agent
	// (errdefs.ErrUnavailable when the sandbox is gone or not running) and
	// the release of the call's slot in the data plane's budget
	// (too_many_requests or account_calls_full when it has none).
	OpenEnvd(ctx context.Context, token, id string) (*guest.Client, func(), error)
	// Peek reads a sandbox whoever's it is (auto-resume decides from its
	// state and lifecycle before any caller is known).
	Peek(ctx context.Context, id string) (sandbox.Sandbox, error)
	// ResumeForOwner resumes a paused sandbox as its owner would, waits
	// until it runs and gives it timeoutSeconds (E2B's auto-resume).
	ResumeForOwner(ctx context.Context, id string, timeoutSeconds int) error
}

// Options configure the facade.
type Options struct {
	App    App
	Logger *slog.Logger
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
	app      App
	log      *slog.Logger
	domain   string
	envd     http.Handler
	procs    *processTable
	watchers *watcherTable
	defaults defaultUsers
	samples  *samplers
	wakes    wakes
	// envdLocal serves envd for the sandboxes this process runs.
	envdLocal http.Handler
}

// New makes a facade. Processes started through it run on when zeishd stops,
// like any guest process whose agent connection breaks.
func New(opts Options) *Facade {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	f := &Facade{app: opts.App, log: opts.Logger, domain: strings.ToLower(opts.Domain), envd: opts.Envd,
		procs: newProcessTable(), watchers: newWatcherTable()}
	f.samples = newSamplers(func(ctx context.Context, id, token string) (*guest.Client, func(), error) {
		return f.app.OpenEnvd(ctx, token, id)
	})
	f.envdLocal = f.newEnvdHandler()
	return f
}

// Close stops the facade's background work (metrics sampling).
func (f *Facade) Close() { f.samples.close() }

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
		{"POST " + p + "/sandboxes/{id}/connect", f.withKey(f.connect)}, // e2b ≤ 2.50
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
	mux.Handle(Prefix+"/envd/", f.envdServer())
	mux.HandleFunc(Prefix+"/", notServed)
	return mux
}

// notServed answers what E2B's API has and zeish does not (templates built
// from a Dockerfile, volumes, secrets, updateNetwork, logs…): 501, in E2B's
// shape, never a 404 an SDK would read as "no such sandbox".
func notServed(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotImplemented, fmt.Sprintf("%s %s is not served by zeish's E2B API (templates, volumes, secrets, updateNetwork and logs are not; see zeish's docs/e2b.md)",
		r.Method, strings.TrimPrefix(r.URL.Path, Prefix)))
}

// EnvdHandler serves envd for the sandboxes this process runs: paths
// under Prefix+"/envd/", the sandbox in the E2b-Sandbox-Id header, checked
// with its X-Access-Token. A node agent serves it alone.
func (f *Facade) EnvdHandler() http.Handler { return f.envdLocal }

func (f *Facade) newEnvdHandler() http.Handler {
	envd := http.NewServeMux()
	envd.HandleFunc("GET /health", f.health)
	envd.HandleFunc("GET /metrics", f.envdMetrics)
	envd.HandleFunc("GET /files", f.readFile)
	envd.HandleFunc("POST /files", f.writeFile)
	envd.HandleFunc("/", notServed)
	envd.Handle(processconnect.NewProcessHandler(&processService{f: f}))
	envd.Handle(filesystemconnect.NewFilesystemHandler(&filesystemService{f: f}))
	return http.StripPrefix(Prefix+"/envd", f.withSignature(f.withSeries(f.withSandbox(f.sampled(envd)))))
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
			// A paused sandbox created with autoResume wakes for its ports'
			// traffic too.
			n, _ := strconv.Atoi(port)
			f.autoResume(r.Context(), host, r.Header.Get(trafficTokenHeader), n)
			next.ServeHTTP(w, portRequest(r, host, port))
			return
		case host != "":
			r = rewrite(r, Prefix+"/envd"+r.URL.Path)
			r.Header.Set("E2b-Sandbox-Id", host)
			r.Header.Set("E2b-Sandbox-Port", envdPort)
		case r.URL.Path == Prefix || strings.HasPrefix(r.URL.Path, Prefix+"/"):
		case r.URL.Path == "/files" && r.URL.Query().Has("signature"):
			// A signed URL made with E2B_SANDBOX_URL set: the SDK drops
			// that URL's path (sign.go).
			if r.Header.Get("E2b-Sandbox-Id") == "" {
				writeError(w, http.StatusBadRequest, "a signed URL names its sandbox by host name (49983-<sandbox>.<domain>): with E2B_SANDBOX_URL set it names none; "+
					"set ZEISH_E2B_DOMAIN and E2B_DOMAIN (not E2B_SANDBOX_URL), or send the E2b-Sandbox-Id header")
				return
			}
			r = rewrite(r, Prefix+"/envd/files")
		default:
			next.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// IsStream reports whether r is one of the facade's data-plane streams:
// envd's routes (file transfers, process output), by path or by a
// sandbox's host name, a signed /files URL, and a guest port by host name.
// The server's deadlines spare them (server.Limits.Streams) as they spare
// zeish's own data plane.
func (f *Facade) IsStream(r *http.Request) bool {
	if strings.HasPrefix(r.URL.Path, Prefix+"/envd/") || (r.URL.Path == "/files" && r.URL.Query().Has("signature")) {
		return true
	}
	host, port := f.hostRoute(r.Host)
	return host != "" && port != ""
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
