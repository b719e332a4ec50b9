package server

import (
	"net/http"

	"github.com/zeish/zeish/api"
)

// clone is POST …/clone (and …/fork): children that carry on from the
// sandbox's running state.
func (s *Server) clone(w http.ResponseWriter, r *http.Request) {
	var req api.CloneRequest
	wait, err := decodeAsync(r, &req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	resp, err := s.ctl.Clone(r.Context(), callerFrom(r.Context()), r.PathValue("id"), req)
	s.cloned(w, r, resp, wait, err)
}

// cloneSnapshot starts children from a snapshot: fork children of the
// sandbox as it was then, the sandbox itself untouched.
func (s *Server) cloneSnapshot(w http.ResponseWriter, r *http.Request) {
	var req api.CloneRequest
	wait, err := decodeAsync(r, &req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	resp, err := s.ctl.CloneSnapshot(r.Context(), callerFrom(r.Context()), r.PathValue("id"), r.PathValue("snapshot"), req)
	s.cloned(w, r, resp, wait, err)
}

// cloned answers a clone: at once (202), or once every child settled (200).
func (s *Server) cloned(w http.ResponseWriter, r *http.Request, resp api.CloneResponse, wait bool, err error) {
	status := http.StatusAccepted
	if err == nil && wait {
		resp.Sandboxes, err = s.ctl.SettledAll(r.Context(), resp.Sandboxes)
		status = http.StatusOK
	}
	reply(w, r, status, resp, err)
}
