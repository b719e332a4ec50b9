package server

import (
	"context"
	"fmt"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/sandbox"
)

// What other front ends mounted beside the API (internal/e2b) need from the
// server: they make the control-plane calls through Handler, as any client,
// and reach a sandbox's agent with a data-plane token, as the data plane does.

// SandboxAgent checks a data-plane token for sandbox id and returns the
// sandbox's agent. A sandbox that is gone or not running is
// errdefs.ErrUnavailable; a bad token errdefs.ErrUnauthenticated.
func (s *Server) SandboxAgent(ctx context.Context, id, token string) (*guest.Client, error) {
	if err := sandbox.CheckID(sandbox.PrefixSandbox, id); err != nil {
		return nil, err
	}
	acct, err := s.checkToken(ctx, token, id)
	if err != nil {
		return nil, err
	}
	rec, err := s.store.GetSandbox(ctx, id)
	if err != nil && !errdefs.Is(err, errdefs.ClassNotFound) {
		return nil, storeErr(err)
	}
	if err != nil || rec.AccountID != acct {
		return nil, fmt.Errorf("sandbox %s not found: %w", id, errdefs.ErrUnavailable)
	}
	if !sandbox.Allows(rec.State, sandbox.OpAccess) {
		return nil, fmt.Errorf("sandbox %s is %s, not running: %w", id, rec.State, errdefs.ErrUnavailable)
	}
	return s.node.Agent(ctx, rec)
}

// Authenticate checks an API key and returns its account's id.
func (s *Server) Authenticate(ctx context.Context, key string) (string, error) {
	a, err := s.store.AccountByKeyHash(ctx, HashKey(key))
	if err != nil {
		return "", err
	}
	return a.ID, nil
}
