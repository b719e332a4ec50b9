package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/sandbox"
)

// The E2B control plane, translated into calls to zeish's application.

type callerCtx struct{}

// withKey authenticates X-API-KEY, a zeish API key (or its E2B form), and
// hands the handler its caller.
func (f *Facade) withKey(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-API-KEY")
		if key == "" {
			writeError(w, http.StatusUnauthorized, "missing X-API-KEY header")
			return
		}
		who, err := f.app.Authenticate(r.Context(), key)
		if err != nil {
			f.fail(w, err)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), callerCtx{}, who)))
	}
}

func callerFrom(ctx context.Context) control.Caller {
	c, _ := ctx.Value(callerCtx{}).(control.Caller)
	return c
}

// answer is an error the facade answers itself, in E2B's terms.
type answer struct {
	status  int
	code    string
	message string
}

func (e *answer) Error() string { return e.code + ": " + e.message }

// fail answers err in E2B's shape: {code, message, error_code?}, the
// status of errdefs's table and the words a client may read
// (errdefs.Public). E2B's error_code, "machine-readable, not a closed
// set", carries zeish's code. A server fault is logged with its detail.
func (f *Facade) fail(w http.ResponseWriter, err error) {
	status, code, msg := http.StatusInternalServerError, "", err.Error()
	var a *answer
	var coded *errdefs.Error
	switch {
	case errors.As(err, &a):
		status, code, msg = a.status, a.code, a.message
	case errors.As(err, &coded):
		if errdefs.ServerFault(err) {
			f.log.Error("e2b: call failed", "err", err)
		}
		status = errdefs.HTTPStatus(err)
		code, msg = errdefs.Public(err)
	}
	body := map[string]any{"code": status, "message": msg}
	if code != "" {
		body["error_code"] = code
	}
	writeJSON(w, status, body)
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

// The application's operations E2B's lifecycle (lifecycle.go) is written
// against, as the caller of the request.

// runOp carries out op (pause, resume, stop or start) on a sandbox of the
// caller's and answers it once settled.
func (f *Facade) runOp(ctx context.Context, id string, op sandbox.Op) (sandbox.Sandbox, error) {
	sb, err := f.app.Lifecycle(ctx, callerFrom(ctx), op, id)
	if err != nil {
		return sb, err
	}
	return f.app.Settled(ctx, sb)
}

// setEnd sets a sandbox's timeout (and its action, when not "").
func (f *Facade) setEnd(ctx context.Context, id string, seconds int, action string) (sandbox.Sandbox, error) {
	return f.app.SetTimeout(ctx, callerFrom(ctx), id, api.TimeoutRequest{TimeoutSeconds: seconds, OnTimeout: action})
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
	ctx, who := r.Context(), callerFrom(r.Context())
	var sb sandbox.Sandbox
	if isSnapshotID(req.TemplateID) {
		// A snapshot seeds the sandbox (E2B's Sandbox.create(snapshotID)):
		// its env and metadata are the snapshot's sandbox's.
		sb, err = f.fromSnapshot(ctx, req.TemplateID)
	} else {
		sb, err = f.app.Create(ctx, who, api.CreateSandboxRequest{
			Template: req.TemplateID, Env: req.EnvVars, Metadata: req.Metadata,
			TimeoutSeconds: timeout + bootAllowance, OnTimeout: action,
		})
		if err == nil {
			sb, err = f.app.Settled(ctx, sb)
		}
	}
	if err != nil {
		f.fail(w, err)
		return
	}
	if sb.State != sandbox.StateRunning {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("sandbox %s did not start: %s: %s", sb.ID, sb.ErrorCode, sb.ErrorMessage))
		return
	}
	if sb, err = f.setEnd(ctx, sb.ID, timeout, action); err != nil {
		f.fail(w, err)
		return
	}
	f.answerCreated(ctx, w, http.StatusCreated, sb)
}

// answerCreated answers created(sb) with status.
func (f *Facade) answerCreated(ctx context.Context, w http.ResponseWriter, status int, sb sandbox.Sandbox) {
	body, err := f.created(ctx, sb)
	if err != nil {
		f.fail(w, err)
		return
	}
	writeJSON(w, status, body)
}

// created is the answer of create, connect and fork: how to reach envd,
// with a data-plane token of the caller's key.
func (f *Facade) created(ctx context.Context, sb sandbox.Sandbox) (map[string]any, error) {
	// On the expiry grid, so signed URLs can be checked (sign.go).
	token, err := f.app.TokenUntil(ctx, callerFrom(ctx), sb.ID, tokenExpiry(time.Now()))
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
	sb, err := f.app.Sandbox(ctx, callerFrom(ctx), id)
	if err != nil {
		return sb, notFoundIfInvalid(id, err)
	}
	if _, ok := state(sb.State); !ok {
		return sb, sandboxNotFound(id)
	}
	return sb, nil
}

// sandboxNotFound is E2B's 404 for a sandbox, in its words.
func sandboxNotFound(id string) error {
	return &answer{status: http.StatusNotFound, code: errdefs.ErrNotFound.Code, message: fmt.Sprintf("Sandbox %q doesn't exist or you don't have access to it", id)}
}

// notFoundIfInvalid: an id that zeish cannot even parse names no sandbox,
// which E2B reports as 404, as it does one that is not there.
func notFoundIfInvalid(id string, err error) error {
	if errdefs.Is(err, errdefs.ClassInvalid) || errdefs.Is(err, errdefs.ClassNotFound) {
		return sandboxNotFound(id)
	}
	return err
}

func (f *Facade) get(w http.ResponseWriter, r *http.Request) {
	sb, err := f.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		f.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, f.detail(sb))
}

func (f *Facade) kill(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sb, err := f.lookup(ctx, r.PathValue("id"))
	if err == nil {
		sb, err = f.app.Delete(ctx, callerFrom(ctx), sb.ID)
		if err == nil {
			_, err = f.app.Settled(ctx, sb)
		}
		f.defaults.forget(sb.ID)
		f.samples.forget(sb.ID)
	}
	if err != nil {
		f.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// templateAlias answers whether a template of that name exists for the
// caller (its own or a built-in, never another account's); zeish
// templates are known by name, which is their id as well.
func (f *Facade) templateAlias(w http.ResponseWriter, r *http.Request) {
	alias := r.PathValue("alias")
	if err := f.app.TemplateKnown(r.Context(), callerFrom(r.Context()), alias); err != nil {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": true})
}
