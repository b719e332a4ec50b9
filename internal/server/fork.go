package server

import (
	"net/http"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

func (s *Server) clone(w http.ResponseWriter, r *http.Request) { s.cloneFrom(w, r, false) }

// cloneSnapshot starts children from a snapshot: fork children of the
// sandbox as it was then, the sandbox itself untouched.
func (s *Server) cloneSnapshot(w http.ResponseWriter, r *http.Request) { s.cloneFrom(w, r, true) }

func (s *Server) cloneFrom(w http.ResponseWriter, r *http.Request, fromSnapshot bool) {
	var req api.CloneRequest
	wait, err := decodeAsync(r, &req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	children, err := cloneChildren(req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	parent, err := s.ownSandbox(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	overrides, err := sandbox.ForkGit(parent.Sandbox, forkOverrides(req))
	if err != nil {
		writeError(w, r, err)
		return
	}
	for _, c := range children {
		sandbox.Inherit(&c.Sandbox, parent.Sandbox, overrides)
	}
	if err := s.forkFeatures(r, parent.Sandbox, children[0].Sandbox); err != nil {
		writeError(w, r, err)
		return
	}
	if req.Network != nil {
		netw, err := networkOf(req.Network)
		if err != nil {
			writeError(w, r, err)
			return
		}
		for _, c := range children {
			p := *netw
			c.Network = &p
		}
	}
	var pause time.Duration
	var made []*store.SandboxRecord
	if fromSnapshot {
		snap, serr := s.ownSnapshot(r)
		if serr != nil {
			writeError(w, r, serr)
			return
		}
		made, err = s.control.CloneSnapshot(r.Context(), parent, snap.ID, children)
	} else {
		pause, made, err = s.control.CloneWith(r.Context(), parent, children, req.Placement)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	if s.opts.Metrics != nil {
		s.opts.Metrics.ForkPause.Observe(pause.Seconds())
	}
	status := http.StatusAccepted
	if wait {
		ctx, cancel := waitContext(r.Context(), 600)
		defer cancel()
		for i, c := range made {
			if made[i], err = s.node.Wait(ctx, c.ID, ""); err != nil {
				writeError(w, r, err)
				return
			}
		}
		status = http.StatusOK
	}
	out := api.CloneResponse{PauseMS: pause.Milliseconds(), Sandboxes: []sandbox.Sandbox{}}
	for _, c := range made {
		out.Sandboxes = append(out.Sandboxes, s.view(c))
	}
	writeJSON(w, status, out)
}

// cloneChildren validates a clone request into child records to fill in,
// named (SPEC, fork rule 1).
func cloneChildren(req api.CloneRequest) ([]*store.SandboxRecord, error) {
	switch {
	case req.MaxCostMicros != nil && *req.MaxCostMicros < 0:
		return nil, invalid("max_cost_micros must not be negative")
	}
	names, err := sandbox.ChildNames(req.Name, req.Count)
	if err != nil {
		return nil, err
	}
	var out []*store.SandboxRecord
	for _, name := range names {
		out = append(out, &store.SandboxRecord{Sandbox: sandbox.Sandbox{Name: name}})
	}
	return out, nil
}

// forkOverrides are the fields of req a child does not inherit (SPEC, fork rule 4).
func forkOverrides(req api.CloneRequest) sandbox.ForkOverrides {
	return sandbox.ForkOverrides{GitBranch: req.GitBranch, PRNumber: req.PRNumber, MaxCostMicros: req.MaxCostMicros,
		Browser: req.Browser, Desktop: req.Desktop}
}
