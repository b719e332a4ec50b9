package server

import (
	"net/http"
	"slices"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// maxTimeout bounds a sandbox's timeout: a lifetime, not a budget (that is
// max_cost_micros).
const maxTimeout = 30 * 24 * time.Hour

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
