package server

import (
	"net/http"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/control"
)

func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := control.CheckSecretName(name); err != nil {
		writeError(w, r, err)
		return
	}
	var req api.PutSecretRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	sec, err := s.ctl.PutSecret(r.Context(), callerFrom(r.Context()), name, req)
	reply(w, r, http.StatusOK, sec, err)
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	list, err := s.ctl.Secrets(r.Context(), callerFrom(r.Context()))
	reply(w, r, http.StatusOK, list, err)
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if err := s.ctl.DeleteSecret(r.Context(), callerFrom(r.Context()), r.PathValue("name")); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
