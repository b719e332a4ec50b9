package server

import (
	"net/http"

	"github.com/zeish/zeish/sandbox"
)

// forkFeatures refuses children that switch on a browser or desktop their
// template does not carry. Only what the fork turns on is checked: what the
// parent already has it keeps.
func (s *Server) forkFeatures(r *http.Request, parent, child sandbox.Sandbox) error {
	want := sandbox.WantedFeatures(child.Browser && !parent.Browser, child.Desktop && !parent.Desktop)
	if len(want) == 0 {
		return nil
	}
	tpl, err := s.opts.Catalog.FeaturesOf(r.Context(), parent.Template)
	if err != nil {
		return err
	}
	return s.opts.Catalog.RequireFeatures(r.Context(), accountFrom(r.Context()).ID, tpl, want)
}
