package server

import (
	"net/http"

	"github.com/zeish/zeish/api"
)

// The admin API: accounts, keys and nodes; control refuses callers that
// are not admins.

// withAdmin is withAccount for the admin API.
func (s *Server) withAdmin(h http.HandlerFunc) http.HandlerFunc { return s.withAccount(h) }

func (s *Server) createAccount(w http.ResponseWriter, r *http.Request) {
	var req api.CreateAccountRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	a, err := s.ctl.CreateAccount(r.Context(), callerFrom(r.Context()), req)
	reply(w, r, http.StatusCreated, a, err)
}

func (s *Server) listAccounts(w http.ResponseWriter, r *http.Request) {
	list, err := s.ctl.Accounts(r.Context(), callerFrom(r.Context()))
	reply(w, r, http.StatusOK, list, err)
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	if err := decode(r, &struct{}{}); err != nil {
		writeError(w, r, err)
		return
	}
	k, err := s.ctl.CreateKey(r.Context(), callerFrom(r.Context()), r.PathValue("id"))
	reply(w, r, http.StatusCreated, k, err)
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	list, err := s.ctl.Keys(r.Context(), callerFrom(r.Context()), r.URL.Query().Get("account"))
	reply(w, r, http.StatusOK, list, err)
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	k, err := s.ctl.RevokeKey(r.Context(), callerFrom(r.Context()), r.PathValue("id"))
	reply(w, r, http.StatusOK, k, err)
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	list, err := s.ctl.Nodes(r.Context(), callerFrom(r.Context()))
	reply(w, r, http.StatusOK, list, err)
}

// drainNode stops (drain) or resumes (undrain) placements on a node; its
// sandboxes keep running either way.
func (s *Server) drainNode(drain bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n, err := s.ctl.Drain(r.Context(), callerFrom(r.Context()), r.PathValue("id"), drain)
		reply(w, r, http.StatusOK, n, err)
	}
}
