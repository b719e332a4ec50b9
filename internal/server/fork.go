package server

import (
	"fmt"
	"net/http"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

func (s *Server) clone(w http.ResponseWriter, r *http.Request) {
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
	for _, c := range children {
		inherit(c, parent, req)
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
	// A fork of N is N creates and N running slots, all or none.
	done, err := s.quotas.admit(r.Context(), parent.AccountID, len(children), true, "")
	if err != nil {
		writeError(w, r, err)
		return
	}
	pause, made, err := s.node.Clone(r.Context(), parent.ID, children)
	done(len(made))
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

// cloneChildren validates a clone request into child records to fill in.
func cloneChildren(req api.CloneRequest) ([]*store.SandboxRecord, error) {
	count := req.Count
	if count == 0 {
		count = 1
	}
	if count < 1 || count > api.MaxCloneCount {
		return nil, invalid("count %d is outside 1..%d", req.Count, api.MaxCloneCount)
	}
	switch {
	case req.PRNumber != nil && *req.PRNumber < 0:
		return nil, invalid("pr_number must not be negative")
	case req.MaxCostMicros != nil && *req.MaxCostMicros < 0:
		return nil, invalid("max_cost_micros must not be negative")
	case req.GitBranch != nil && len(*req.GitBranch) > 256:
		return nil, invalid("git_branch is too long")
	}
	var out []*store.SandboxRecord
	for i := 1; i <= count; i++ {
		name := req.Name
		if name != "" && count > 1 {
			name = fmt.Sprintf("%s-%d", req.Name, i)
		}
		if name != "" {
			if err := sandbox.CheckName(name); err != nil {
				return nil, err
			}
		}
		out = append(out, &store.SandboxRecord{Sandbox: sandbox.Sandbox{Name: name}})
	}
	return out, nil
}

// inherit applies SPEC's fork rule 4 to the fields the caller may override:
// the parent's value unless the request passes one. (Size, region, host, git
// repo and environment are always the parent's; the node copies those.)
func inherit(c, parent *store.SandboxRecord, req api.CloneRequest) {
	c.GitBranch, c.PRNumber, c.MaxCostMicros = parent.GitBranch, parent.PRNumber, parent.MaxCostMicros
	c.Browser, c.Desktop = parent.Browser, parent.Desktop
	c.Metadata = map[string]string{}
	for k, v := range parent.Metadata {
		c.Metadata[k] = v
	}
	if req.GitBranch != nil {
		c.GitBranch = *req.GitBranch
	}
	if req.PRNumber != nil {
		c.PRNumber = *req.PRNumber
	}
	if req.MaxCostMicros != nil {
		c.MaxCostMicros = *req.MaxCostMicros
	}
	if req.Browser != nil {
		c.Browser = *req.Browser
	}
	if req.Desktop != nil {
		c.Desktop = *req.Desktop
	}
}
