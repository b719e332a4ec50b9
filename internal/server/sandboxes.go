package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/internal/guestread"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

const (
	maxEnvVars     = 128
	maxMetadata    = 64
	maxValueLength = 4096
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

func checkVars(field string, m map[string]string, max int, keyPattern *regexp.Regexp) error {
	if len(m) > max {
		return invalid("%s: at most %d entries", field, max)
	}
	for k, v := range m {
		if !keyPattern.MatchString(k) {
			return invalid("%s: %q is not a valid name", field, k)
		}
		if len(v) > maxValueLength || strings.ContainsRune(v, 0) {
			return invalid("%s: value of %q is too long or holds a NUL byte", field, k)
		}
	}
	return nil
}

var metadataKey = regexp.MustCompile(`^[A-Za-z0-9_.\-/]{1,128}$`)

// newRecord validates a create request and turns it into a record for the node.
func (s *Server) newRecord(ctx context.Context, acct store.Account, req api.CreateSandboxRequest) (*store.SandboxRecord, error) {
	if req.Template == "" {
		req.Template = s.opts.Catalog.Default()
	}
	tpl, err := s.opts.Catalog.Resolve(ctx, acct.ID, req.Template)
	if err != nil {
		return nil, fmt.Errorf("template %q does not exist: %w", req.Template, errdefs.ErrUnknownTemplate)
	}
	if !tpl.Builtin && tpl.State != sandbox.TemplateReady {
		return nil, fmt.Errorf("template %q is %s, not ready: %w", req.Template, tpl.State, errdefs.ErrInvalidState)
	}
	if err := s.opts.Catalog.RequireFeatures(ctx, acct.ID, tpl, sandbox.WantedFeatures(req.Browser, req.Desktop)); err != nil {
		return nil, err
	}
	req.Template = tpl.Key() // the node boots from the key; names are per account
	if req.Name != "" {
		if err := sandbox.CheckName(req.Name); err != nil {
			return nil, err
		}
	}
	size, err := sandbox.ResolveSize(req.Size, req.VCPUs, req.MemoryMiB, req.DiskMiB)
	if err != nil {
		return nil, err
	}
	if err := checkTemplateDisk(size.DiskMiB, tpl); err != nil {
		return nil, err
	}
	if err := s.checkRegion(ctx, req.Region); err != nil {
		return nil, err
	}
	if err := checkVars("env", req.Env, maxEnvVars, envName); err != nil {
		return nil, err
	}
	if err := checkVars("secrets", req.Secrets, maxEnvVars, envName); err != nil {
		return nil, err
	}
	if err := checkVars("metadata", req.Metadata, maxMetadata, metadataKey); err != nil {
		return nil, err
	}
	if req.Accel != "" && req.Accel != "kvm" && req.Accel != "tcg" {
		return nil, fmt.Errorf("accel %q: want kvm or tcg: %w", req.Accel, errdefs.ErrInvalidAccel)
	}
	if err := checkVars("node_labels", req.NodeLabels, maxMetadata, metadataKey); err != nil {
		return nil, err
	}
	if err := s.checkLabels(req.NodeLabels); err != nil {
		return nil, err
	}
	if req.MaxCostMicros < 0 {
		return nil, invalid("max_cost_micros must not be negative")
	}
	var git sandbox.Sandbox
	if err := sandbox.ResolveGit(&git, sandbox.GitRequest{Repo: req.GitRepo, Branch: req.GitBranch, PRNumber: req.PRNumber,
		Path: req.GitPath, PRRef: req.GitPRRef, TokenSecret: req.GitTokenSecret, Secrets: req.Secrets}); err != nil {
		return nil, err
	}
	if git.GitRepo != "" && !catalog.HasGit(tpl) {
		return nil, fmt.Errorf("template %q has no git; git_repo needs the %s template: %w", tpl.Name, catalog.DebianName, errdefs.ErrTemplateNoGit)
	}
	netw, err := networkOf(req.Network)
	if err != nil {
		return nil, err
	}
	timeoutAt, onTimeout, err := resolveTimeout(req.TimeoutSeconds, req.OnTimeout, time.Now())
	if err != nil {
		return nil, err
	}
	if timeoutAt != nil && onTimeout == "" {
		onTimeout = sandbox.OnTimeoutDelete
	}
	return &store.SandboxRecord{
		Sandbox: sandbox.Sandbox{
			Network:   netw,
			Region:    req.Region, // where to place it; the node sets its own
			AccountID: acct.ID, Name: req.Name, Template: req.Template,
			VCPUs: size.VCPUs, MemoryMiB: size.MemoryMiB, DiskMiB: size.DiskMiB,
			Env: req.Env, GitRepo: git.GitRepo, GitBranch: git.GitBranch, PRNumber: git.PRNumber,
			GitPath: git.GitPath, GitPRRef: git.GitPRRef, GitTokenSecret: git.GitTokenSecret,
			MaxCostMicros: req.MaxCostMicros, Browser: req.Browser, Desktop: req.Desktop, Metadata: req.Metadata,
			TimeoutAt: timeoutAt, OnTimeout: onTimeout,
			// What the node must have; the node then sets the accel it has.
			Accel: req.Accel, NodeLabels: req.NodeLabels,
		},
		SecretEnv: req.Secrets,
	}, nil
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSandboxRequest
	wait, err := decodeAsync(r, &req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	rec, err := s.newRecord(r.Context(), accountFrom(r.Context()), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	rec, err = s.control.Create(r.Context(), rec)
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.answer(w, r, rec, wait)
}

// answer returns a sandbox after an asynchronous call: at once (202), or
// once it settled when the client asked to wait (200).
func (s *Server) answer(w http.ResponseWriter, r *http.Request, rec *store.SandboxRecord, wait bool) {
	rec, status, err := s.settle(r, rec, wait)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, status, s.view(rec))
}

// settle is how every asynchronous call ends: without wait the sandbox as
// it is and 202; with wait the sandbox once it settled and 200.
func (s *Server) settle(r *http.Request, rec *store.SandboxRecord, wait bool) (*store.SandboxRecord, int, error) {
	if !wait {
		return rec, http.StatusAccepted, nil
	}
	ctx, cancel := waitContext(r.Context(), 600)
	defer cancel()
	rec, err := s.node.Wait(ctx, rec.ID, "")
	return rec, http.StatusOK, err
}

// decodeAsync reads the body of an asynchronous call into v and its ?wait.
func decodeAsync(r *http.Request, v any) (wait bool, err error) {
	if err := decode(r, v); err != nil {
		return false, err
	}
	return waitParam(r)
}

func waitParam(r *http.Request) (bool, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, invalid("wait=%q: want true or false", v)
	}
	return b, nil
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.SandboxFilter{AccountID: accountFrom(r.Context()).ID}
	if v := q.Get("state"); v != "" {
		for _, st := range strings.Split(v, ",") {
			if !sandbox.State(st).Valid() {
				writeError(w, r, invalid("state %q is not a sandbox state", st))
				return
			}
			f.States = append(f.States, sandbox.State(st))
		}
	}
	if v := q.Get("include_destroyed"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, r, invalid("include_destroyed=%q: want true or false", v))
			return
		}
		f.IncludeDestroyed = b
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > api.MaxListLimit {
			writeError(w, r, invalid("limit=%q: want 1..%d", v, api.MaxListLimit))
			return
		}
		f.Limit = n
	}
	if v := q.Get("after"); v != "" {
		if err := sandbox.CheckID(sandbox.PrefixSandbox, v); err != nil {
			writeError(w, r, invalid("after=%q: want a sandbox id (a next_after)", v))
			return
		}
		f.After = v
	}
	rows, err := s.store.ListSandboxes(r.Context(), f)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := api.SandboxList{Sandboxes: []sandbox.Sandbox{}}
	for _, row := range rows {
		out.Sandboxes = append(out.Sandboxes, s.view(row))
	}
	if f.Limit > 0 && len(rows) == f.Limit {
		out.NextAfter = rows[len(rows)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	rec, err := s.ownSandbox(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.view(rec))
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	wait, err := waitParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	rec, err := s.ownSandbox(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	rec, err = s.control.Delete(r.Context(), rec)
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.answer(w, r, rec, wait)
}

func (s *Server) waitSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.WaitRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if req.State != "" && !req.State.Valid() {
		writeError(w, r, invalid("state %q is not a sandbox state", req.State))
		return
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > 600 {
		writeError(w, r, invalid("timeout_seconds must be within 0..600"))
		return
	}
	rec, err := s.ownSandbox(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	ctx, cancel := waitContext(r.Context(), req.TimeoutSeconds)
	defer cancel()
	rec, err = s.node.Wait(ctx, rec.ID, req.State)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.view(rec))
}

const (
	defaultTokenTTL = 15 * time.Minute
	maxTokenTTL     = time.Hour
)

func (s *Server) access(w http.ResponseWriter, r *http.Request) {
	var req api.AccessRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	ttl := defaultTokenTTL
	if req.TTLSeconds != 0 {
		ttl = time.Duration(req.TTLSeconds) * time.Second
	}
	if ttl <= 0 || ttl > maxTokenTTL {
		writeError(w, r, invalid("ttl_seconds must be within 1..%d", int(maxTokenTTL.Seconds())))
		return
	}
	rec, err := s.ownSandbox(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if _, err := sandbox.NextFor(rec.ID, rec.State, sandbox.OpAccess); err != nil {
		writeError(w, r, err)
		return
	}
	key, err := s.requestKey(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	url := s.publicURL(r) + api.DataPath + "/sandboxes/" + rec.ID
	if d, ok := s.node.(dataPlaneLocator); ok {
		// The sandbox's node serves its data plane itself.
		if url, err = d.DataURL(r.Context(), rec); err != nil {
			writeError(w, r, err)
			return
		}
	}
	exp := time.Now().Add(ttl).UTC().Truncate(time.Second)
	writeJSON(w, http.StatusOK, api.Access{
		URL:       url,
		Token:     s.tokens.issue(rec, key.ID, exp),
		ExpiresAt: exp,
	})
}

// publicURL is the base of the data-plane URLs handed out with a token:
// ZEISH_PUBLIC_URL, else the address the client connected to. The Host
// header is the client's (or a proxy's) to write, so it names the URL only
// where it cannot send the token elsewhere: a console request (sameSite
// matched its browser's Origin to it) or a loopback name on this port.
func (s *Server) publicURL(r *http.Request) string {
	if s.opts.PublicURL != "" {
		return strings.TrimSuffix(s.opts.PublicURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + urlHost(r)
}

// urlHost is the host[:port] publicURL names (see there).
func urlHost(r *http.Request) string {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return r.Host // served without a listener (no address to prefer)
	}
	if _, console := r.Context().Value(apiKeyCtx{}).(store.APIKey); console {
		return r.Host
	}
	_, localPort, err := net.SplitHostPort(local.String())
	if err != nil {
		return local.String()
	}
	host, port, err := net.SplitHostPort(r.Host)
	if err == nil && port == localPort {
		if ip := net.ParseIP(host); strings.EqualFold(host, "localhost") || (ip != nil && ip.IsLoopback()) {
			return r.Host
		}
	}
	return local.String()
}

// dataPlaneLocator is a control.Node whose sandboxes' data plane is served
// elsewhere (the cluster's Router: on each sandbox's node).
type dataPlaneLocator interface {
	DataURL(ctx context.Context, r *store.SandboxRecord) (string, error)
}

// dataBase is the base URL of sandbox rec's data plane: its node's in a
// cluster, else this server's.
func (s *Server) dataBase(r *http.Request, rec *store.SandboxRecord) (string, error) {
	if d, ok := s.node.(dataPlaneLocator); ok {
		return d.DataURL(r.Context(), rec)
	}
	return s.publicURL(r) + api.DataPath + "/sandboxes/" + rec.ID, nil
}

// guests reads sandboxes' guests: on this host (one zeishd), or on each
// sandbox's node over the node protocol (the cluster's Router).
func (s *Server) guests() guestread.Reads {
	if g, ok := s.node.(guestread.Reads); ok {
		return g
	}
	return guestread.Local{Node: s.node}
}

// regionChecker is a control.Node of many regions (the cluster's Router).
type regionChecker interface {
	HasRegion(ctx context.Context, region string) (bool, error)
}

// checkLabels refuses node labels on a single zeishd: its one node has none.
func (s *Server) checkLabels(labels map[string]string) error {
	if _, cluster := s.node.(regionChecker); cluster || len(labels) == 0 {
		return nil
	}
	return fmt.Errorf("node_labels %v: this zeishd is one node without labels (labels are ZEISH_NODE_LABELS of a cluster's node agents): %w", labels, errdefs.ErrNodeFull)
}

// checkRegion refuses a region no node serves.
func (s *Server) checkRegion(ctx context.Context, region string) error {
	if region == "" {
		return nil
	}
	if rc, ok := s.node.(regionChecker); ok {
		has, err := rc.HasRegion(ctx, region)
		if err != nil {
			return storeErr(err)
		}
		if !has {
			return invalid("region %q: no node serves it", region)
		}
		return nil
	}
	if region != s.node.Region() {
		return invalid("region %q: no node serves it (this server has %q)", region, s.node.Region())
	}
	return nil
}
