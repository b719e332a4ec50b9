package server

import (
	"net/http"
	"strconv"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/guest/desktop"
	"github.com/zeish/zeish/internal/control"
)

// The desktop of a sandbox with desktop: true: actions and screenshots on
// the data plane, the status on the control plane. sandboxd performs them
// (guest/desktop); the server refuses what it can tell is bad before the
// guest sees it.

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
	if err := control.CheckDesktop(targetFrom(r.Context()).Sandbox); err != nil {
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
	if err := control.CheckDesktop(targetFrom(r.Context()).Sandbox); err != nil {
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
	st, err := s.ctl.DesktopStatus(r.Context(), callerFrom(r.Context()), r.PathValue("id"))
	reply(w, r, http.StatusOK, st, err)
}
