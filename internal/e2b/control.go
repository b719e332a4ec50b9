package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/control"
	"io"
	"net/http"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
)

// The E2B control plane, translated into calls to zeish's application.

type callerCtx struct{}

// withKey authenticates X-API-KEY, a zeish API key, and hands the handler
// its caller.
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

// fail answers err in E2B's shape: the status of errdefs's table and the
// words a client may read (errdefs.Public); a server fault is logged with
// its detail.
func (f *Facade) fail(w http.ResponseWriter, err error) {
	if a, ok := err.(*answer); ok {
		msg := a.message
		if a.code != "" {
			msg = a.code + ": " + msg
		}
		writeError(w, a.status, msg)
		return
	}
	var coded *errdefs.Error
	if !errors.As(err, &coded) {
		// The facade's own words (a sandbox that did not come up).
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if errdefs.ServerFault(err) {
		f.log.Error("e2b: call failed", "err", err)
	}
	code, msg := errdefs.Public(err)
	writeError(w, errdefs.HTTPStatus(err), code+": "+msg)
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
	AutoPause  bool              `json:"autoPause"`
}

// defaultTimeout is E2B's when a create names none.
const defaultTimeout = 15

// bootAllowance is added to a create's timeout until the sandbox runs.
const bootAllowance = 600

func onTimeout(autoPause bool) string {
	if autoPause {
		return sandbox.OnTimeoutPause
	}
	return sandbox.OnTimeoutDelete
}

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
		writeError(w, http.StatusBadRequest, "timeout must be positive")
		return
	}
	// E2B counts the timeout from when the sandbox is ready; zeish from the
	// create. The create gets room for a slow boot, and the timeout is set
	// again once the sandbox runs.
	ctx, who := r.Context(), callerFrom(r.Context())
	var sb sandbox.Sandbox
	var err error
	if isSnapshotID(req.TemplateID) {
		// A snapshot seeds the sandbox (E2B's Sandbox.create(snapshotID)):
		// its env and metadata are the snapshot's sandbox's.
		sb, err = f.fromSnapshot(ctx, req.TemplateID)
	} else {
		sb, err = f.app.Create(ctx, who, api.CreateSandboxRequest{
			Template: req.TemplateID, Env: req.EnvVars, Metadata: req.Metadata,
			TimeoutSeconds: timeout + bootAllowance, OnTimeout: onTimeout(req.AutoPause),
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
	if sb, err = f.app.SetTimeout(ctx, who, sb.ID, api.TimeoutRequest{TimeoutSeconds: timeout, OnTimeout: onTimeout(req.AutoPause)}); err != nil {
		f.fail(w, err)
		return
	}
	f.answerCreated(r.Context(), w, http.StatusCreated, sb)
}

// answerCreated answers created(sb) with status.
func (f *Facade) answerCreated(ctx context.Context, w http.ResponseWriter, status int, sb sandbox.Sandbox) {
	body, err := f.created(ctx, sb)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, status, body)
}

// created is the answer of create, connect and fork: how to reach envd,
// with a data-plane token of the caller's key.
func (f *Facade) created(ctx context.Context, sb sandbox.Sandbox) (map[string]any, error) {
	token, _, err := f.app.Token(ctx, callerFrom(ctx), sb.ID, tokenTTL)
	if err != nil {
		return nil, err
	}
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
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
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
		"lifecycle":   map[string]any{"onTimeout": action, "autoResume": false},
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
		return sb, notFoundIfInvalid(err)
	}
	if _, ok := state(sb.State); !ok {
		return sb, &answer{status: http.StatusNotFound, code: "not_found", message: fmt.Sprintf("sandbox %s is %s", id, sb.State)}
	}
	return sb, nil
}

// notFoundIfInvalid: an id that zeish cannot even parse names no sandbox,
// which E2B reports as 404.
func notFoundIfInvalid(err error) error {
	if errdefs.Is(err, errdefs.ClassInvalid) {
		_, msg := errdefs.Public(err)
		return &answer{status: http.StatusNotFound, code: "not_found", message: msg}
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

// metrics: zeish keeps no per-sandbox resource samples yet, so there are none
// to return for a sandbox that exists.
func (f *Facade) metrics(w http.ResponseWriter, r *http.Request) {
	if _, err := f.lookup(r.Context(), r.PathValue("id")); err != nil {
		f.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, []any{})
}

func (f *Facade) kill(w http.ResponseWriter, r *http.Request) {
	sb, err := f.lookup(r.Context(), r.PathValue("id"))
	if err == nil {
		sb, err = f.app.Delete(r.Context(), callerFrom(r.Context()), sb.ID)
		if err == nil {
			_, err = f.app.Settled(r.Context(), sb)
		}
		f.defaults.forget(sb.ID)
	}
	if err != nil {
		f.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// templateAlias answers whether a template of that name exists; zeish
// templates are known by name, which is their id as well.
func (f *Facade) templateAlias(w http.ResponseWriter, r *http.Request) {
	alias := r.PathValue("alias")
	if err := f.app.TemplateKnown(r.Context(), alias); err != nil {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": true})
}
