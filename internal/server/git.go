package server

import "net/http"

// gitStatus is GET /public/sandboxes/{id}/git: the clone's branch, HEAD and
// dirty files.
func (s *Server) gitStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.ctl.GitStatus(r.Context(), callerFrom(r.Context()), r.PathValue("id"))
	reply(w, r, http.StatusOK, st, err)
}
