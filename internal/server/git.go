package server

import (
	"fmt"
	"net/http"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
)

// gitStatus is GET /public/sandboxes/{id}/git: the clone's branch, HEAD and
// dirty files, read by git in the guest (as the clone's owner).
func (s *Server) gitStatus(w http.ResponseWriter, r *http.Request) {
	rec, err := s.ownSandbox(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if !sandbox.HasClone(rec.Sandbox) {
		writeError(w, r, fmt.Errorf("sandbox %s has no git_repo: %w", rec.ID, errdefs.ErrNoGitRepo))
		return
	}
	release, err := s.calls.acquire(rec.ID, rec.AccountID)
	if err != nil {
		refuseBusy(w, r, err)
		return
	}
	defer release()
	st, err := s.guests().GitStatus(r.Context(), rec)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
