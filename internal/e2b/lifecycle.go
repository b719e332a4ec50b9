package e2b

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
)

// E2B's lifecycle calls: timeouts, pause, resume and connect, fork.

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
		_, err = f.app.SetTimeout(r.Context(), callerFrom(r.Context()), sb.ID, api.TimeoutRequest{TimeoutSeconds: *req.Timeout})
	}
	if err != nil {
		f.fail(w, err)
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
		_, err = f.app.SetTimeout(r.Context(), callerFrom(r.Context()), sb.ID, api.TimeoutRequest{TimeoutSeconds: d})
	}
	if err != nil {
		f.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pause freezes a running sandbox; 409 when it is not running.
func (f *Facade) pause(w http.ResponseWriter, r *http.Request) {
	sb, err := f.lookup(r.Context(), r.PathValue("id"))
	if err == nil {
		sb, err = f.app.Lifecycle(r.Context(), callerFrom(r.Context()), sandbox.OpPause, sb.ID)
	}
	if err == nil {
		_, err = f.app.Settled(r.Context(), sb)
	}
	if err != nil {
		f.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type resumeBody struct {
	Timeout   *int  `json:"timeout"`
	AutoPause *bool `json:"autoPause"`
}

// wake runs a paused or stopped sandbox again (control.Wake) and gives it
// timeout seconds (when asked) from now. It says whether the sandbox had
// to be woken.
func (f *Facade) wake(ctx context.Context, id string, timeout *int, autoPause *bool) (sandbox.Sandbox, bool, error) {
	sb, err := f.lookup(ctx, id)
	if err != nil {
		return sb, false, err
	}
	who := callerFrom(ctx)
	sb, woken, err := f.app.Wake(ctx, who, sb.ID)
	if err != nil {
		return sb, woken, err
	}
	if sb.State != sandbox.StateRunning {
		return sb, woken, fmt.Errorf("sandbox %s is %s after resuming: %s", sb.ID, sb.State, sb.ErrorMessage)
	}
	if timeout != nil || autoPause != nil {
		req := api.TimeoutRequest{TimeoutSeconds: defaultTimeout}
		if timeout != nil {
			req.TimeoutSeconds = *timeout
		}
		if autoPause != nil {
			req.OnTimeout = onTimeout(*autoPause)
		}
		if sb, err = f.app.SetTimeout(ctx, who, sb.ID, req); err != nil {
			return sb, woken, err
		}
	}
	return sb, woken, nil
}

// connect is the current SDK's resume: 201 when the sandbox had to be woken,
// 200 when it was running.
func (f *Facade) connect(w http.ResponseWriter, r *http.Request) {
	var req resumeBody
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	sb, woken, err := f.wake(r.Context(), r.PathValue("id"), req.Timeout, nil)
	if err != nil {
		f.fail(w, err)
		return
	}
	status := http.StatusOK
	if woken {
		status = http.StatusCreated
	}
	f.answerCreated(r.Context(), w, status, sb)
}

// resume is the older SDKs' call: only a paused sandbox may be resumed.
func (f *Facade) resume(w http.ResponseWriter, r *http.Request) {
	var req resumeBody
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	sb, err := f.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		f.fail(w, err)
		return
	}
	if st, _ := state(sb.State); st != "paused" {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %s is already running", sb.ID))
		return
	}
	sb, _, err = f.wake(r.Context(), sb.ID, req.Timeout, req.AutoPause)
	if err != nil {
		f.fail(w, err)
		return
	}
	f.answerCreated(r.Context(), w, http.StatusCreated, sb)
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
	ctx, who := r.Context(), callerFrom(r.Context())
	sb, err := f.lookup(ctx, r.PathValue("id"))
	var resp api.CloneResponse
	if err == nil {
		resp, err = f.app.Clone(ctx, who, sb.ID, api.CloneRequest{Count: req.Count})
	}
	if err == nil {
		resp.Sandboxes, err = f.app.SettledAll(ctx, resp.Sandboxes)
	}
	if err != nil {
		f.fail(w, err)
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
		if _, err := f.app.SetTimeout(ctx, who, child.ID, api.TimeoutRequest{TimeoutSeconds: timeout, OnTimeout: sb.OnTimeout}); err != nil {
			out = append(out, map[string]any{"error": map[string]any{"code": 500, "message": err.Error()}})
			continue
		}
		body, err := f.created(ctx, child)
		if err != nil {
			out = append(out, map[string]any{"error": map[string]any{"code": 500, "message": err.Error()}})
			continue
		}
		out = append(out, map[string]any{"sandbox": body})
	}
	writeJSON(w, http.StatusOK, out)
}
