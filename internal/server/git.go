package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/gitws"
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
	agent, err := s.node.Agent(r.Context(), rec)
	if err != nil {
		writeError(w, r, err)
		return
	}
	release, err := s.calls.acquire(rec.ID, rec.AccountID)
	if err != nil {
		refuseBusy(w, r, err)
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	st, err := gitws.Status(ctx, agent, rec.Sandbox)
	if gerr := (*gitws.Error)(nil); errors.As(err, &gerr) || errors.Is(err, gitws.NoGit) {
		// The clone is the guest's: its processes may have removed or broken it.
		err = fmt.Errorf("in %s: %v: %w", rec.GitPath, err, errdefs.ErrInvalidState)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
