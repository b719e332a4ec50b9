package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/sandbox"
)

// E2B's lifecycle on zeish's: what a timeout does (kill, pause, or a
// filesystem-only pause), pause, connect (every SDK's route) and the older
// resume, and auto-resume. It calls zeish's application (internal/control):
// which op wakes a sandbox is its Wake's to say; runOp and setEnd
// (control.go) are the rest, as the request's caller; auto-resume, before
// any caller is known, uses its Peek and ResumeForOwner.
//
// A filesystem-only pause (keepMemory: false, or autoPauseMemory: false) is
// zeish's stop: the sandbox uses no compute and no RAM, its disk is kept.
// E2B's promise stops at the disk (its connect reboots the sandbox); zeish's
// start brings back its memory and processes too. Like E2B, auto-resume
// leaves such a sandbox paused: only connect brings it back.

// lifecycleRequest is what create asks of the sandbox's end.
type lifecycleRequest struct {
	AutoPause       bool  `json:"autoPause"`
	AutoPauseMemory *bool `json:"autoPauseMemory"`
	AutoResume      *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
}

// autoResumeKey is the metadata key that marks a sandbox for auto-resume:
// its value is the timeout, in seconds, a resume by traffic gives (the
// create's, as E2B's). E2B's views hide it.
const autoResumeKey = "e2b.autoResume"

// resumeTimeout is the timeout a connect or resume without one gives: what
// the SDKs up to 2.50 always send.
const resumeTimeout = 300

// onTimeout is the zeish action for the request's lifecycle, refusing the
// combinations E2B's API refuses (with its words).
func (lr lifecycleRequest) onTimeout() (string, error) {
	keepMemory := lr.AutoPauseMemory == nil || *lr.AutoPauseMemory
	autoResume := lr.AutoResume != nil && lr.AutoResume.Enabled
	switch {
	case !keepMemory && !lr.AutoPause:
		return "", errors.New("autoPauseMemory=false only applies when autoPause is true.")
	case !keepMemory && autoResume:
		return "", errors.New("autoPauseMemory=false (filesystem-only auto-pause) cannot be combined with autoResume: a filesystem-only snapshot cannot be auto-resumed by traffic and must be resumed explicitly.")
	case autoResume && !lr.AutoPause:
		return "", errors.New("autoResume can only be enabled when the sandbox pauses on timeout (autoPause).")
	case !keepMemory:
		return sandbox.OnTimeoutStop, nil
	case lr.AutoPause:
		return sandbox.OnTimeoutPause, nil
	}
	return sandbox.OnTimeoutDelete, nil
}

// withAutoResume marks md for auto-resume when asked, with the create's
// timeout.
func (lr lifecycleRequest) withAutoResume(md map[string]string, timeout int) map[string]string {
	if lr.AutoResume == nil || !lr.AutoResume.Enabled {
		return md
	}
	out := map[string]string{}
	for k, v := range md {
		out[k] = v
	}
	out[autoResumeKey] = strconv.Itoa(timeout)
	return out
}

// autoResumes is the timeout an auto-resume of sb gives, or 0 when sb is
// not one to auto-resume.
func autoResumes(sb sandbox.Sandbox) int {
	n, err := strconv.Atoi(sb.Metadata[autoResumeKey])
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// pauseBody is POST /sandboxes/{id}/pause's body: memory false is a
// filesystem-only pause.
type pauseBody struct {
	Memory *bool `json:"memory"`
}

// pause freezes a running sandbox (in memory), or stops it (memory: false);
// 409 when it is already paused, as E2B answers (the SDK's false).
func (f *Facade) pause(w http.ResponseWriter, r *http.Request) {
	var req pauseBody
	sb, ok := f.decodeFor(w, r, &req)
	if !ok {
		return
	}
	if st, _ := state(sb.State); st == "paused" {
		writeError(w, http.StatusConflict, fmt.Sprintf("Error pausing sandbox - sandbox '%s' is already paused", sb.ID))
		return
	}
	op := sandbox.OpPause
	if req.Memory != nil && !*req.Memory {
		op = sandbox.OpStop
	}
	if _, err := f.runOp(r.Context(), sb.ID, op); err != nil {
		f.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connectBody is connect's (and the older resume's) body.
type connectBody struct {
	Timeout   *int  `json:"timeout"`
	AutoPause *bool `json:"autoPause"` // resume only
	// Memory false asks a paused sandbox back from its disk only (e2b ≥
	// 2.49's onResume: "reboot").
	Memory *bool `json:"memory"`
}

// errNoColdResume: zeish resumes a paused sandbox with its memory; E2B's
// API refuses memory: false where it cannot honour it rather than restore
// memory anyway, and so does the facade.
var errNoColdResume = errors.New("Resuming without memory (memory: false) is not supported: zeish resumes a paused sandbox with its memory; " +
	"resume it without memory: false, or pause it with keepMemory: false (its disk only) to begin with")

// wake brings a sandbox back to running as connect does: a running one has
// its end only ever moved later; a paused one is resumed, a filesystem-only
// paused (stopped) one started (control.Wake), and either then ends timeout
// seconds from now. It says whether the sandbox had to be woken.
func (f *Facade) wake(ctx context.Context, id string, req connectBody) (sandbox.Sandbox, bool, error) {
	sb, err := f.lookup(ctx, id)
	if err != nil {
		return sb, false, err
	}
	timeout := resumeTimeout
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	if timeout < 0 {
		return sb, false, &answer{status: http.StatusBadRequest, message: "Timeout must be greater than 0"}
	}
	if sb.State == sandbox.StatePaused && req.Memory != nil && !*req.Memory {
		return sb, false, &answer{status: http.StatusBadRequest, message: errNoColdResume.Error()}
	}
	sb, woken, err := f.app.Wake(ctx, callerFrom(ctx), sb.ID)
	if err != nil {
		return sb, woken, err
	}
	if sb.State != sandbox.StateRunning {
		return sb, woken, fmt.Errorf("sandbox %s is %s after resuming: %s", sb.ID, sb.State, sb.ErrorMessage)
	}
	if woken {
		action := ""
		if req.AutoPause != nil {
			action = sandbox.OnTimeoutDelete
			if *req.AutoPause {
				action = sandbox.OnTimeoutPause
			}
		}
		sb, err = f.setEnd(ctx, sb.ID, timeout, action)
		return sb, true, err
	}
	// Running: E2B's connect only ever extends the end ("TTL is only
	// extended"); a sandbox without one keeps none.
	if sb.TimeoutAt != nil && req.Timeout != nil && time.Now().Add(time.Duration(timeout)*time.Second).After(*sb.TimeoutAt) {
		sb, err = f.setEnd(ctx, sb.ID, timeout, "")
	}
	return sb, false, err
}

// connect is every SDK's connect (POST /sandboxes/{id}/connect up to 2.50,
// /v2/… since): 201 when the sandbox had to be woken, 200 when it ran.
func (f *Facade) connect(w http.ResponseWriter, r *http.Request) {
	var req connectBody
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Error when parsing request: %s", err))
		return
	}
	req.AutoPause = nil
	sb, woken, err := f.wake(r.Context(), r.PathValue("id"), req)
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

// resume is the older SDKs' call: only a paused sandbox may be resumed (409
// for a running one, E2B's "already running").
func (f *Facade) resume(w http.ResponseWriter, r *http.Request) {
	var req connectBody
	sb, ok := f.decodeFor(w, r, &req)
	if !ok {
		return
	}
	var err error
	if st, _ := state(sb.State); st != "paused" {
		writeError(w, http.StatusConflict, fmt.Sprintf("Sandbox %s is already running", sb.ID))
		return
	}
	if req.Timeout == nil {
		req.Timeout = new(int)
		*req.Timeout = defaultTimeout // ResumedSandbox's default
	}
	if sb, _, err = f.wake(r.Context(), sb.ID, req); err != nil {
		f.fail(w, err)
		return
	}
	f.answerCreated(r.Context(), w, http.StatusCreated, sb)
}

// decodeFor reads a call's body into v and finds its sandbox, answering
// the error itself when either fails.
func (f *Facade) decodeFor(w http.ResponseWriter, r *http.Request, v any) (sandbox.Sandbox, bool) {
	if err := decodeBody(r, v); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Error when parsing request: %s", err))
		return sandbox.Sandbox{}, false
	}
	sb, err := f.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		f.fail(w, err)
		return sb, false
	}
	return sb, true
}

// Auto-resume: a request for a paused sandbox created with autoResume
// (envd's, or a port's through getHost) resumes it first, as E2B's proxy
// does, and gives it its create's timeout again. Only a request the
// sandbox's owner could make counts (a good token, or a port opened to
// everyone); a filesystem-only paused (stopped) sandbox is left alone.

// wakes makes concurrent requests for one sandbox share its resume.
type wakes struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// autoResume resumes sandbox id when it is paused and marked for it, and
// the request may (token good for it, or port public). It says whether it
// did; errors are the resume's.
func (f *Facade) autoResume(ctx context.Context, id, token string, port int) (bool, error) {
	sb, err := f.app.Peek(ctx, id)
	if err != nil || sb.State != sandbox.StatePaused || autoResumes(sb) == 0 {
		return false, nil
	}
	allowed := token != "" && f.app.CheckToken(ctx, id, token) == nil
	for _, p := range sb.PublicPorts {
		allowed = allowed || (port > 0 && p == port)
	}
	if !allowed {
		return false, nil
	}
	f.wakes.mu.Lock()
	if f.wakes.m == nil {
		f.wakes.m = map[string]chan struct{}{}
	}
	if ch, ok := f.wakes.m[id]; ok {
		f.wakes.mu.Unlock()
		select {
		case <-ch:
			return true, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	ch := make(chan struct{})
	f.wakes.m[id] = ch
	f.wakes.mu.Unlock()
	defer func() {
		f.wakes.mu.Lock()
		delete(f.wakes.m, id)
		f.wakes.mu.Unlock()
		close(ch)
	}()
	// The resume outlives a request that gives up waiting for it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	if err := f.app.ResumeForOwner(rctx, id, autoResumes(sb)); err != nil {
		f.log.Warn("e2b: auto-resume", "sandbox", id, "err", err)
		return false, err
	}
	f.log.Info("e2b: auto-resumed", "sandbox", id)
	return true, nil
}

// sandboxAgent is App.OpenEnvd that first auto-resumes a paused sandbox
// marked for it.
func (f *Facade) sandboxAgent(ctx context.Context, id, token string) (*guest.Client, func(), error) {
	agent, release, err := f.app.OpenEnvd(ctx, token, id)
	if err == nil || !errdefs.Is(err, errdefs.ClassUnavailable) {
		return agent, release, err
	}
	if woke, werr := f.autoResume(ctx, id, token, 0); werr != nil || !woke {
		return nil, nil, err
	}
	return f.app.OpenEnvd(ctx, token, id)
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
		_, err = f.setEnd(r.Context(), sb.ID, *req.Timeout, "")
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
		_, err = f.setEnd(r.Context(), sb.ID, d, "")
	}
	if err != nil {
		f.fail(w, err)
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
		if _, err := f.setEnd(ctx, child.ID, timeout, sb.OnTimeout); err != nil {
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
