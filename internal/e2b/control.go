package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
)

// The E2B control plane, translated into calls to zeish's public API.

type keyCtx struct{}

// withKey requires X-API-KEY; zeish itself decides whether the key is good.
func (f *Facade) withKey(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-API-KEY")
		if key == "" {
			writeError(w, http.StatusUnauthorized, "missing X-API-KEY header")
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), keyCtx{}, key)))
	}
}

// zeishError is an error answer of zeish's API.
type zeishError struct {
	status  int
	code    string
	message string
}

func (e *zeishError) Error() string { return e.code + ": " + e.message }

// call makes one zeish API call in-process with the caller's key and decodes
// the answer into out (when not nil). A non-2xx answer is a *zeishError.
func (f *Facade) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, api.BasePath+"/public"+path, body)
	if err != nil {
		return err
	}
	key, _ := ctx.Value(keyCtx{}).(string)
	req.Header.Set("Authorization", "Bearer "+key)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	f.api.ServeHTTP(rec, req)
	if rec.status >= 300 {
		var eb api.ErrorBody
		json.Unmarshal(rec.body.Bytes(), &eb)
		return &zeishError{status: rec.status, code: eb.Error.Code, message: eb.Error.Message}
	}
	if out != nil {
		if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
			return fmt.Errorf("decode %s %s: %w", method, path, err)
		}
	}
	return nil
}

// The zeish operations E2B's lifecycle (lifecycle.go) is written against:
// these few change when the facade calls zeish's application directly.

// zeishOp carries out pause, resume, stop or start on a sandbox of the
// caller's and answers it once settled.
func (f *Facade) zeishOp(ctx context.Context, id, op string) (sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	err := f.call(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/"+op+"?wait=true", struct{}{}, &sb)
	return sb, err
}

// zeishWait waits for a sandbox of the caller's to reach st.
func (f *Facade) zeishWait(ctx context.Context, id string, st sandbox.State) (sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	err := f.call(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/wait", api.WaitRequest{State: st}, &sb)
	return sb, err
}

// zeishTimeout sets a sandbox's timeout (and its action, when not "").
func (f *Facade) zeishTimeout(ctx context.Context, id string, seconds int, action string) (sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	err := f.call(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/timeout", api.TimeoutRequest{TimeoutSeconds: seconds, OnTimeout: action}, &sb)
	return sb, err
}

// recorder is a ResponseWriter kept in memory: control-plane answers are
// small JSON documents.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *recorder) WriteHeader(code int)        { r.status = code }

// fail answers err in E2B's shape, with zeish's status and words.
// E2B's body is {code, message, error_code?}: error_code, "machine-readable,
// not a closed set", carries zeish's code.
func fail(w http.ResponseWriter, err error) {
	if ze, ok := err.(*zeishError); ok {
		body := map[string]any{"code": ze.status, "message": ze.message}
		if ze.code != "" {
			body["error_code"] = ze.code
		}
		writeJSON(w, ze.status, body)
		return
	}
	writeError(w, http.StatusInternalServerError, err.Error())
}

// writeError answers E2B's error body: the HTTP status as a number and words.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return err
	}
	return json.Unmarshal(b, v)
}

// newSandbox is the body of POST /sandboxes and /v2/sandboxes. Fields the
// facade cannot honour (network rules, volumes, MCP) are ignored.
type newSandbox struct {
	TemplateID string            `json:"templateID"`
	Timeout    *int              `json:"timeout"`
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars"`
	lifecycleRequest
}

// defaultTimeout is E2B's when a create names none.
const defaultTimeout = 15

// bootAllowance is added to a create's timeout until the sandbox runs.
const bootAllowance = 600

func (f *Facade) create(w http.ResponseWriter, r *http.Request) {
	var req newSandbox
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	if req.TemplateID == "" {
		req.TemplateID = "base"
	}
	timeout := defaultTimeout
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	if timeout <= 0 {
		writeError(w, http.StatusBadRequest, "Timeout must be greater than 0")
		return
	}
	action, err := req.onTimeout()
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	req.Metadata = req.withAutoResume(req.Metadata, timeout)
	// E2B counts the timeout from when the sandbox is ready; zeish from the
	// create. The create gets room for a slow boot, and the timeout is set
	// again once the sandbox runs.
	var sb sandbox.Sandbox
	if isSnapshotID(req.TemplateID) {
		// A snapshot seeds the sandbox (E2B's Sandbox.create(snapshotID)):
		// its env and metadata are the snapshot's sandbox's.
		sb, err = f.fromSnapshot(r.Context(), req.TemplateID, req)
	} else {
		err = f.call(r.Context(), http.MethodPost, "/sandboxes?wait=true", api.CreateSandboxRequest{
			Template: req.TemplateID, Env: req.EnvVars, Metadata: req.Metadata,
			TimeoutSeconds: timeout + bootAllowance, OnTimeout: action,
		}, &sb)
	}
	if err != nil {
		fail(w, err)
		return
	}
	if sb.State != sandbox.StateRunning {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("sandbox %s did not start: %s: %s", sb.ID, sb.ErrorCode, sb.ErrorMessage))
		return
	}
	if sb, err = f.zeishTimeout(r.Context(), sb.ID, timeout, action); err != nil {
		fail(w, err)
		return
	}
	body, err := f.created(r.Context(), sb)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, body)
}

// created is the answer of create, connect and fork: how to reach envd,
// with a data-plane token of the caller's key.
func (f *Facade) created(ctx context.Context, sb sandbox.Sandbox) (map[string]any, error) {
	key, _ := ctx.Value(keyCtx{}).(string)
	// On the expiry grid, so signed URLs can be checked (sign.go).
	token, err := f.backend.IssueTokenUntil(ctx, sb.ID, key, tokenExpiry(time.Now()))
	if err != nil {
		return nil, err
	}
	f.startSampling(sb.ID, token)
	out := map[string]any{
		"sandboxID":       sb.ID,
		"templateID":      sb.Template,
		"alias":           sb.Template,
		"clientID":        "zeish",
		"envdVersion":     envdVersion,
		"envdAccessToken": token,
		// The same token opens the sandbox's ports (getHost) in the
		// e2b-traffic-access-token header.
		"trafficAccessToken": token,
	}
	if f.domain != "" {
		out["domain"] = f.domain
	}
	return out, nil
}

// state is E2B's two states: a sandbox that can take commands (or soon will)
// is running, one that holds its state without running is paused. The rest
// are not E2B sandboxes at all.
func state(st sandbox.State) (string, bool) {
	switch st {
	case sandbox.StateStarting, sandbox.StateRunning:
		return "running", true
	case sandbox.StatePaused, sandbox.StateStopping, sandbox.StateStopped:
		return "paused", true
	}
	return "", false
}

// never is the end of a sandbox without a timeout.
var never = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// detail is a sandbox as E2B's get and list show it.
func (f *Facade) detail(sb sandbox.Sandbox) map[string]any {
	st, _ := state(sb.State)
	end := never
	if sb.TimeoutAt != nil {
		end = *sb.TimeoutAt
	}
	action := "kill"
	if sb.OnTimeout == sandbox.OnTimeoutPause || sb.OnTimeout == sandbox.OnTimeoutStop {
		action = "pause"
	}
	md := map[string]string{}
	for k, v := range sb.Metadata {
		if k != autoResumeKey {
			md[k] = v
		}
	}
	out := map[string]any{
		"sandboxID":   sb.ID,
		"templateID":  sb.Template,
		"alias":       sb.Template,
		"clientID":    "zeish",
		"startedAt":   sb.CreatedAt,
		"endAt":       end,
		"state":       st,
		"cpuCount":    sb.VCPUs,
		"memoryMB":    sb.MemoryMiB,
		"diskSizeMB":  sb.DiskMiB,
		"envdVersion": envdVersion,
		"metadata":    md,
		"lifecycle":   map[string]any{"onTimeout": action, "autoResume": autoResumes(sb) > 0},
	}
	if f.domain != "" {
		out["domain"] = f.domain
	}
	return out
}

// lookup gets a sandbox that E2B would know: a destroyed or failed one is
// not found.
func (f *Facade) lookup(ctx context.Context, id string) (sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	if err := f.call(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, &sb); err != nil {
		return sb, notFoundIfInvalid(id, err)
	}
	if _, ok := state(sb.State); !ok {
		return sb, sandboxNotFound(id)
	}
	return sb, nil
}

// sandboxNotFound is E2B's 404 for a sandbox, in its words.
func sandboxNotFound(id string) error {
	return &zeishError{status: http.StatusNotFound, code: "not_found", message: fmt.Sprintf("Sandbox %q doesn't exist or you don't have access to it", id)}
}

// notFoundIfInvalid: an id that zeish cannot even parse names no sandbox,
// which E2B reports as 404, as it does one that is not there.
func notFoundIfInvalid(id string, err error) error {
	if ze, ok := err.(*zeishError); ok && (ze.status == http.StatusBadRequest || ze.status == http.StatusNotFound) {
		return sandboxNotFound(id)
	}
	return err
}

func (f *Facade) get(w http.ResponseWriter, r *http.Request) {
	sb, err := f.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, f.detail(sb))
}

func (f *Facade) kill(w http.ResponseWriter, r *http.Request) {
	sb, err := f.lookup(r.Context(), r.PathValue("id"))
	if err == nil {
		err = f.call(r.Context(), http.MethodDelete, "/sandboxes/"+sb.ID+"?wait=true", nil, nil)
		f.defaults.forget(sb.ID)
		f.samples.forget(sb.ID)
	}
	if err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// all lists the caller's E2B-visible sandboxes, newest first.
func (f *Facade) all(ctx context.Context) ([]sandbox.Sandbox, error) {
	var list api.SandboxList
	if err := f.call(ctx, http.MethodGet, "/sandboxes", nil, &list); err != nil {
		return nil, err
	}
	var out []sandbox.Sandbox
	for _, sb := range list.Sandboxes {
		if _, ok := state(sb.State); ok {
			out = append(out, sb)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID > out[j].ID
	})
	return out, nil
}

// metadataFilter parses E2B's metadata query: "k=v&k2=v2", its keys and
// values URL-encoded once more inside.
func metadataFilter(q string) (map[string]string, error) {
	if q == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(q)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range vals {
		kk, err1 := url.QueryUnescape(k)
		vv, err2 := url.QueryUnescape(v[0])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("metadata %q is not URL-encoded", q)
		}
		out[kk] = vv
	}
	return out, nil
}

func matches(sb sandbox.Sandbox, md map[string]string) bool {
	for k, v := range md {
		if sb.Metadata[k] != v {
			return false
		}
	}
	return true
}

func (f *Facade) listV1(w http.ResponseWriter, r *http.Request) {
	md, err := metadataFilter(r.URL.Query().Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	all, err := f.all(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	out := []map[string]any{}
	for _, sb := range all {
		if st, _ := state(sb.State); st == "running" && matches(sb, md) {
			out = append(out, f.detail(sb))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// listV2 is Sandbox.list (list.go).
func (f *Facade) listV2(w http.ResponseWriter, r *http.Request) {
	lq, err := parseListQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	all, err := f.all(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	page, next := lq.page(all)
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	out := []map[string]any{}
	for _, sb := range page {
		out = append(out, f.detail(sb))
	}
	writeJSON(w, http.StatusOK, out)
}

type timeoutBody struct {
	Timeout  *int `json:"timeout"`
	Duration *int `json:"duration"`
}

// setTimeout: the sandbox ends timeout seconds from now.
func (f *Facade) setTimeout(w http.ResponseWriter, r *http.Request) {
	var req timeoutBody
	if err := decodeBody(r, &req); err != nil || req.Timeout == nil || *req.Timeout <= 0 {
		writeError(w, http.StatusBadRequest, "body must be {\"timeout\": seconds > 0}")
		return
	}
	sb, err := f.lookup(r.Context(), r.PathValue("id"))
	if err == nil {
		err = f.call(r.Context(), http.MethodPost, "/sandboxes/"+sb.ID+"/timeout", api.TimeoutRequest{TimeoutSeconds: *req.Timeout}, nil)
	}
	if err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// refresh keeps a sandbox alive for duration seconds more from now, never
// shortening its life.
func (f *Facade) refresh(w http.ResponseWriter, r *http.Request) {
	var req timeoutBody
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	d := defaultTimeout
	if req.Duration != nil {
		d = *req.Duration
	}
	if d < 0 || d > 3600 {
		writeError(w, http.StatusBadRequest, "duration must be within 0..3600")
		return
	}
	sb, err := f.lookup(r.Context(), r.PathValue("id"))
	if err == nil && sb.TimeoutAt != nil && time.Now().Add(time.Duration(d)*time.Second).After(*sb.TimeoutAt) {
		err = f.call(r.Context(), http.MethodPost, "/sandboxes/"+sb.ID+"/timeout", api.TimeoutRequest{TimeoutSeconds: d}, nil)
	}
	if err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type forkBody struct {
	Timeout *int `json:"timeout"`
	Count   int  `json:"count"`
}

// fork is zeish's clone: children carry on from the parent's running state.
func (f *Facade) fork(w http.ResponseWriter, r *http.Request) {
	var req forkBody
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	if req.Count == 0 {
		req.Count = 1
	}
	sb, err := f.lookup(r.Context(), r.PathValue("id"))
	var resp api.CloneResponse
	if err == nil {
		err = f.call(r.Context(), http.MethodPost, "/sandboxes/"+sb.ID+"/clone?wait=true", api.CloneRequest{Count: req.Count}, &resp)
	}
	if err != nil {
		fail(w, err)
		return
	}
	timeout := defaultTimeout
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	out := []map[string]any{}
	for _, child := range resp.Sandboxes {
		if child.State != sandbox.StateRunning {
			out = append(out, map[string]any{"error": map[string]any{"code": 500, "message": child.ID + " is " + string(child.State) + ": " + child.ErrorMessage}})
			continue
		}
		if err := f.call(r.Context(), http.MethodPost, "/sandboxes/"+child.ID+"/timeout", api.TimeoutRequest{TimeoutSeconds: timeout, OnTimeout: sb.OnTimeout}, nil); err != nil {
			out = append(out, map[string]any{"error": map[string]any{"code": 500, "message": err.Error()}})
			continue
		}
		body, err := f.created(r.Context(), child)
		if err != nil {
			out = append(out, map[string]any{"error": map[string]any{"code": 500, "message": err.Error()}})
			continue
		}
		out = append(out, map[string]any{"sandbox": body})
	}
	writeJSON(w, http.StatusOK, out)
}

// templateAlias answers whether a template of that name exists for the
// caller (its own or a built-in, never another account's); zeish
// templates are known by name, which is their id as well.
func (f *Facade) templateAlias(w http.ResponseWriter, r *http.Request) {
	key, _ := r.Context().Value(keyCtx{}).(string)
	account, err := f.backend.Authenticate(r.Context(), key)
	if err != nil {
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	alias := r.PathValue("alias")
	if err := f.tpls.Known(r.Context(), account, alias); err != nil {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": true})
}
