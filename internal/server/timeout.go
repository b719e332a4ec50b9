package server

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// maxTimeout bounds a sandbox's timeout: a lifetime, not a budget (that is
// max_cost_micros).
const maxTimeout = 30 * 24 * time.Hour

// timeoutReason is the state_reason of a sandbox paused or stopped because its
// time was up.
const timeoutReason = "timeout"

// resolveTimeout validates a timeout and its action: a deadline (nil for none)
// and the action, "" when none was asked for.
func resolveTimeout(seconds int, action string, now time.Time) (*time.Time, string, error) {
	if seconds < 0 || time.Duration(seconds)*time.Second > maxTimeout {
		return nil, "", invalid("timeout_seconds must be within 0..%d", int(maxTimeout.Seconds()))
	}
	if action != "" && !slices.Contains(sandbox.TimeoutActions, action) {
		return nil, "", invalid("on_timeout %q must be one of %v", action, sandbox.TimeoutActions)
	}
	if seconds == 0 {
		return nil, action, nil
	}
	at := now.Add(time.Duration(seconds) * time.Second).UTC().Truncate(time.Millisecond)
	return &at, action, nil
}

// setTimeout moves a sandbox's deadline: timeout_seconds from now, or none.
func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	var req api.TimeoutRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	at, action, err := resolveTimeout(req.TimeoutSeconds, req.OnTimeout, time.Now())
	if err != nil {
		writeError(w, r, err)
		return
	}
	rec, err := s.ownSandbox(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	rec, err = s.store.UpdateSandbox(r.Context(), rec.ID, func(x *store.SandboxRecord) error {
		if _, err := sandbox.NextFor(x.ID, x.State, sandbox.OpSetTimeout); err != nil {
			return err
		}
		x.TimeoutAt = at
		if action != "" {
			x.OnTimeout = action
		}
		if x.TimeoutAt != nil && x.OnTimeout == "" {
			x.OnTimeout = sandbox.OnTimeoutDelete
		}
		return nil
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.view(rec))
}

// enforceTimeouts carries out the action of every sandbox whose deadline
// passed. Pause and stop clear the deadline, so a sandbox resumed later runs
// until a client sets a new one.
func (s *Server) enforceTimeouts(ctx context.Context) {
	rows, err := s.store.ListSandboxes(ctx, store.SandboxFilter{States: sandbox.TimeoutStates})
	if err != nil {
		s.log.Warn("timeouts: list sandboxes", "err", err)
		return
	}
	now := time.Now()
	for _, r := range rows {
		if r.TimeoutAt == nil || now.Before(*r.TimeoutAt) {
			continue
		}
		s.log.Info("sandbox timed out", "sandbox", r.ID, "on_timeout", r.OnTimeout, "state", r.State)
		if err := s.expire(ctx, r); err != nil && !errors.Is(err, errdefs.ErrInvalidState) {
			s.log.Warn("timeouts: act", "sandbox", r.ID, "err", err)
		}
	}
}

func (s *Server) expire(ctx context.Context, r *store.SandboxRecord) error {
	var err error
	switch r.OnTimeout {
	case sandbox.OnTimeoutPause:
		if sandbox.Allows(r.State, sandbox.OpPause) {
			_, err = s.node.Pause(ctx, r.ID)
		}
	case sandbox.OnTimeoutStop:
		if sandbox.Allows(r.State, sandbox.OpStop) {
			_, err = s.node.StopReason(ctx, r.ID, timeoutReason)
		}
	default:
		_, err = s.node.Delete(ctx, r.ID)
		return err
	}
	if err != nil {
		return err
	}
	_, err = s.store.UpdateSandbox(ctx, r.ID, func(x *store.SandboxRecord) error {
		// A client may have moved the deadline meanwhile: keep theirs.
		if x.TimeoutAt != nil && x.TimeoutAt.Equal(*r.TimeoutAt) {
			x.TimeoutAt = nil
		}
		return nil
	})
	return err
}
