// Package server is zeish's HTTP front end: the control plane under
// /api/v1 (API-key auth), the data plane under /data/v1 (short-lived
// per-sandbox tokens), the console's API and /healthz. It is an adapter
// over the application (internal/control): a handler decodes a request,
// calls one control method and encodes its answer; errors become statuses
// by errdefs's table (errors.go). It holds no rule of its own and reaches
// neither the node nor the store (a test keeps it so).
package server

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/internal/metrics"
	"github.com/zeish/zeish/sandbox"
)

// Options configure a Server.
type Options struct {
	// Control is the application every handler calls.
	Control *control.Control
	// Proxy, on a control plane with node agents, hands data-plane
	// traffic (guest ports, the console's upload) to the sandbox's node.
	Proxy   DataPlaneProxy
	Version string
	// PublicURL is the server's address as clients reach it (for data-plane
	// URLs); empty: the address the client connected to (see publicURL).
	PublicURL string
	// PublicDomain, when set, serves guest ports at P-<id>.<PublicDomain>
	// too (the Host header picks the sandbox and port); with none, they are
	// served at P-<id>.localhost (guestorigin.go).
	PublicDomain string
	// GuestDomains are more domains whose P-<id> host names a front end in
	// front of this server routes to guest ports through the path form
	// (E2B's, internal/e2b): a port's page requested by such a name is on
	// its own origin, not sandboxed.
	GuestDomains []string
	// DataPlane bounds the data plane's connections to guests (zero:
	// DefaultDataPlane); what each sandbox and account may hold at once is
	// control's (control.Options.Calls).
	DataPlane *DataPlaneLimits
	Logger    *slog.Logger
	// Metrics, when set, is served at GET /metrics.
	Metrics *metrics.Metrics
}

// Server serves the API.
type Server struct {
	opts    Options
	ctl     *control.Control
	log     *slog.Logger
	data    DataPlaneLimits
	ports   *http.Transport // to guest ports
	browser *http.Transport // to the browser's DevTools: CDP sessions may idle for long
	console consoleSessions
}

// New makes a server.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	data := DefaultDataPlane
	if opts.DataPlane != nil {
		data = *opts.DataPlane
	}
	return &Server{opts: opts, ctl: opts.Control, log: opts.Logger, data: data,
		ports: portTransport(data), browser: portTransport(DataPlaneLimits{PortHeaders: data.PortHeaders})}
}

// Routes lists every route the server serves, as "METHOD /path"; the OpenAPI
// document is tested against it.
func (s *Server) Routes() []string {
	var out []string
	for _, r := range s.routes() {
		out = append(out, r.pattern)
	}
	return out
}

type route struct {
	pattern string
	handler http.HandlerFunc
}

func (s *Server) routes() []route {
	const p = api.BasePath + "/public"
	const d = api.DataPath + "/sandboxes/{id}"
	const a = api.BasePath + "/admin"
	rs := []route{
		{"GET /healthz", s.health},
		{"GET /metrics", s.metrics},
		{"POST " + a + "/accounts", s.withAdmin(s.createAccount)},
		{"GET " + a + "/accounts", s.withAdmin(s.listAccounts)},
		{"POST " + a + "/accounts/{id}/keys", s.withAdmin(s.createKey)},
		{"GET " + a + "/keys", s.withAdmin(s.listKeys)},
		{"DELETE " + a + "/keys/{id}", s.withAdmin(s.revokeKey)},
		{"GET " + a + "/nodes", s.withAdmin(s.listNodes)},
		{"POST " + a + "/nodes/{id}/drain", s.withAdmin(s.drainNode(true))},
		{"POST " + a + "/nodes/{id}/undrain", s.withAdmin(s.drainNode(false))},
		{"GET " + p + "/usage", s.withAccount(s.usage)},
		{"GET " + p + "/pricing/estimate", s.withAccount(s.estimate)},
		{"POST " + p + "/sandboxes", s.withAccount(s.createSandbox)},
		{"GET " + p + "/sandboxes", s.withAccount(s.listSandboxes)},
		{"GET " + p + "/sandboxes/{id}", s.withAccount(s.getSandbox)},
		{"DELETE " + p + "/sandboxes/{id}", s.withAccount(s.deleteSandbox)},
		{"POST " + p + "/sandboxes/{id}/wait", s.withAccount(s.waitSandbox)},
		{"POST " + p + "/sandboxes/{id}/timeout", s.withAccount(s.setTimeout)},
		{"POST " + p + "/sandboxes/{id}/access", s.withAccount(s.access)},
		{"POST " + p + "/sandboxes/{id}/pause", s.withAccount(s.lifecycle(sandbox.OpPause))},
		{"POST " + p + "/sandboxes/{id}/resume", s.withAccount(s.lifecycle(sandbox.OpResume))},
		{"POST " + p + "/sandboxes/{id}/stop", s.withAccount(s.lifecycle(sandbox.OpStop))},
		{"POST " + p + "/sandboxes/{id}/start", s.withAccount(s.lifecycle(sandbox.OpStart))},
		{"PATCH " + p + "/sandboxes/{id}/network", s.withAccount(s.setNetwork)},
		{"POST " + p + "/sandboxes/{id}/ports", s.withAccount(s.setPort)},
		{"GET " + d + "/tcp/{port}", s.tcpPort},
		{"GET " + d + "/ports/{port}/{path...}", s.portProxy},
		{"POST " + d + "/ports/{port}/{path...}", s.portProxy},
		{"PUT " + d + "/ports/{port}/{path...}", s.portProxy},
		{"PATCH " + d + "/ports/{port}/{path...}", s.portProxy},
		{"DELETE " + d + "/ports/{port}/{path...}", s.portProxy},
		{"GET " + d + "/browser/{path...}", s.browserProxy},
		{"PUT " + d + "/browser/{path...}", s.browserProxy},
		{"POST " + p + "/sandboxes/{id}/clone", s.withAccount(s.clone)},
		{"POST " + p + "/sandboxes/{id}/fork", s.withAccount(s.clone)},
		{"GET " + p + "/sandboxes/{id}/lineage", s.withAccount(s.lineage)},
		{"GET " + p + "/sandboxes/{id}/events", s.withAccount(s.events)},
		{"POST " + p + "/sandboxes/{id}/snapshots", s.withAccount(s.createSnapshot)},
		{"GET " + p + "/sandboxes/{id}/snapshots", s.withAccount(s.listSnapshots)},
		{"GET " + p + "/sandboxes/{id}/snapshots/{snapshot}", s.withAccount(s.getSnapshot)},
		{"DELETE " + p + "/sandboxes/{id}/snapshots/{snapshot}", s.withAccount(s.deleteSnapshot)},
		{"POST " + p + "/sandboxes/{id}/snapshots/{snapshot}/restore", s.withAccount(s.restoreSnapshot)},
		{"POST " + p + "/sandboxes/{id}/snapshots/{snapshot}/clone", s.withAccount(s.cloneSnapshot)},
		{"GET " + p + "/snapshots/{id}", s.withAccount(s.getSnapshot)},
		{"DELETE " + p + "/snapshots/{id}", s.withAccount(s.deleteSnapshot)},
		{"POST " + p + "/snapshots/{id}/restore", s.withAccount(s.restoreSnapshot)},
		{"GET " + p + "/templates", s.withAccount(s.listTemplates)},
		{"GET " + p + "/templates/{id}", s.withAccount(s.getTemplate)},
		{"PUT " + p + "/secrets/{name}", s.withAccount(s.putSecret)},
		{"GET " + p + "/secrets", s.withAccount(s.listSecrets)},
		{"DELETE " + p + "/secrets/{name}", s.withAccount(s.deleteSecret)},
		{"POST " + d + "/exec", s.withToken(s.exec)},
		{"GET " + d + "/files", s.withToken(s.readFile)},
		{"PUT " + d + "/files", s.withToken(s.writeFile)},
		{"DELETE " + d + "/files", s.withToken(s.removeFile)},
		{"GET " + d + "/files/list", s.withToken(s.listFiles)},
		{"GET " + d + "/files/stat", s.withToken(s.statFile)},
		{"POST " + d + "/files/mkdir", s.withToken(s.mkdir)},
		{"GET " + d + "/processes", s.withToken(s.processes)},
		{"POST " + d + "/processes/{pid}/kill", s.withToken(s.kill)},
		{"POST " + d + "/desktop/actions", s.withToken(s.desktopAction)},
		{"GET " + d + "/desktop/screenshot", s.withToken(s.desktopScreenshot)},
		{"POST /console/api/session", s.signIn},
		{"GET /console/api/session", s.withSession(s.getSession)},
		{"DELETE /console/api/session", s.withSession(s.signOut)},
		{"PUT /console/api/sandboxes/{id}/files", s.withSession(s.consoleUpload)},
		{"GET " + d + "/terminals", s.withToken(s.listTerminals)},
		{"GET " + d + "/terminals/connect", queryToken(s.withToken(s.newTerminal))},
		{"GET " + d + "/terminals/{pid}/connect", queryToken(s.withToken(s.attachTerminal))},
	}
	// Served where the guest or the template's files are: on this host,
	// or through internal/control's typed calls to the sandbox's (the
	// template's) node.
	rs = append(rs,
		route{"GET " + p + "/sandboxes/{id}/ports", s.withAccount(s.listPorts)},
		route{"GET " + p + "/sandboxes/{id}/browser", s.withAccount(s.getBrowser)},
		route{"GET " + p + "/sandboxes/{id}/git", s.withAccount(s.gitStatus)},
		route{"GET " + p + "/sandboxes/{id}/desktop", s.withAccount(s.desktopStatus)},
		route{"POST " + p + "/templates", s.withAccount(s.createTemplate)},
		route{"DELETE " + p + "/templates/{id}", s.withAccount(s.deleteTemplate)},
		route{"GET " + p + "/templates/{id}/events", s.withAccount(s.templateEvents)},
	)
	return rs
}

// Handler returns the HTTP handler with every route.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, r := range s.routes() {
		mux.HandleFunc(r.pattern, r.handler)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, invalidRoute(r))
	})
	s.registerConsole(mux)
	return withRequestID(s.logRequests(s.byHost(mux)))
}

func invalidRoute(r *http.Request) error {
	return &routeError{r.Method + " " + r.URL.Path}
}

type routeError struct{ route string }

func (e *routeError) Error() string {
	return "no such route: " + e.route + ": " + errdefs.ErrNotFound.Code
}
func (e *routeError) Unwrap() error { return errdefs.ErrNotFound }

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// Flush and Unwrap keep streaming (exec output, downloads) working through
// the recorder.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (s *Server) logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: 200}
		h.ServeHTTP(rec, r)
		// Never log query strings or headers: they may carry tokens.
		s.log.Debug("http", "request_id", requestID(w, r), "method", r.Method, "path", r.URL.Path, "status", rec.status,
			"ms", time.Since(start).Milliseconds())
	})
}

// metrics serves the Prometheus exposition (aggregates only: counts by
// state, pauses, node memory; no ids, names or accounts).
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	if s.opts.Metrics == nil {
		writeError(w, r, invalidRoute(r))
		return
	}
	s.opts.Metrics.Handler().ServeHTTP(w, r)
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	c := s.ctl.Capabilities()
	writeJSON(w, http.StatusOK, api.Health{Status: "ok", Version: s.opts.Version, Accel: string(c.Accel),
		AccelReason: c.AccelReason, AccelProbeMS: c.AccelProbeMS, VMM: c.Name})
}
