package server

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest/desktop"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// The desktop of a sandbox with desktop: true: actions and screenshots on
// the data plane, the status on the control plane. sandboxd performs them
// (guest/desktop); the server refuses what it can tell is bad before the
// guest sees it.

func notDesktop(rec *store.SandboxRecord) error {
	return fmt.Errorf("sandbox %s has no desktop (create or fork it with desktop: true): %w", rec.ID, errdefs.ErrDesktopNotEnabled)
}

// desktopSandbox is the data-plane request's sandbox, if it has a desktop.
func (s *Server) desktopSandbox(r *http.Request) error {
	rec, err := s.store.GetSandbox(r.Context(), r.PathValue("id"))
	if err != nil {
		return storeErr(err)
	}
	if !rec.Desktop {
		return notDesktop(rec)
	}
	return nil
}

func (s *Server) desktopAction(w http.ResponseWriter, r *http.Request) {
	var a api.DesktopAction
	if err := decode(r, &a); err != nil {
		writeError(w, r, err)
		return
	}
	// The screen's size is the guest's to know; it checks again with it.
	if err := desktop.Validate(a, desktop.Size{}); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.desktopSandbox(r); err != nil {
		writeError(w, r, err)
		return
	}
	agent := agentFrom(r.Context())
	if a.Action == desktop.ActionScreenshot {
		png, info, err := agent.DesktopScreenshot(r.Context())
		if err != nil {
			writeError(w, r, err)
			return
		}
		cur, err := agent.DesktopAction(r.Context(), desktop.Action{Action: desktop.ActionCursorPosition})
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, api.DesktopActionResult{X: cur.X, Y: cur.Y, Image: png, Width: info.Width, Height: info.Height})
		return
	}
	res, err := agent.DesktopAction(r.Context(), a)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.DesktopActionResult{X: res.X, Y: res.Y})
}

func (s *Server) desktopScreenshot(w http.ResponseWriter, r *http.Request) {
	if err := s.desktopSandbox(r); err != nil {
		writeError(w, r, err)
		return
	}
	png, _, err := agentFrom(r.Context()).DesktopScreenshot(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", strconv.Itoa(len(png)))
	w.WriteHeader(http.StatusOK)
	w.Write(png)
}

func (s *Server) desktopStatus(w http.ResponseWriter, r *http.Request) {
	rec, err := s.ownSandbox(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if !rec.Desktop {
		writeError(w, r, notDesktop(rec))
		return
	}
	if !sandbox.Allows(rec.State, sandbox.OpAccess) { // not running: no X server
		writeJSON(w, http.StatusOK, api.DesktopStatus{Running: false})
		return
	}
	st, err := s.guests().DesktopStatus(r.Context(), rec)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
