package server

import (
	"net/http"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
)

// networkOf validates the network part of a create or fork (nil: none given).
func networkOf(req *api.NetworkRequest) (*sandbox.Network, error) {
	if req == nil {
		return nil, nil
	}
	n := sandbox.Network{Enabled: req.Enabled == nil || *req.Enabled, Egress: req.Egress, Allow: req.Allow, Deny: req.Deny,
		RateBytes: req.RateBytes, RatePackets: req.RatePackets}
	n, err := n.Normalize()
	if err != nil {
		return nil, invalid("%v", err)
	}
	return &n, nil
}

// setNetwork is PATCH /public/sandboxes/{id}/network: a live change of the
// egress policy. Validated whole before anything changes.
func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) {
	var req api.NetworkPolicyRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	rec, err := s.ownSandbox(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	rec, err = s.control.SetNetwork(r.Context(), rec, sandbox.NetworkChange{Egress: req.Egress, Allow: req.Allow, Deny: req.Deny,
		RateBytes: req.RateBytes, RatePackets: req.RatePackets})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.view(rec))
}
