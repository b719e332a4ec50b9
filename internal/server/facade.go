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

// SandboxAgent checks a data-plane token for sandbox id, takes a slot of
// the data plane's budget for the call (release it when the call ends) and
// returns the sandbox's agent. A sandbox that is gone or not running is
// errdefs.ErrUnavailable; a bad token errdefs.ErrUnauthenticated; no room
// in the budget too_many_requests or account_calls_full.
func (s *Server) SandboxAgent(ctx context.Context, id, token string) (*guest.Client, func(), error) {
	if err := sandbox.CheckID(sandbox.PrefixSandbox, id); err != nil {
		return nil, nil, err
	}
	acct, err := s.checkToken(ctx, token, id)
	if err != nil {
		return nil, nil, err
	}
	rec, err := s.store.GetSandbox(ctx, id)
	if err != nil && !errdefs.Is(err, errdefs.ClassNotFound) {
		return nil, nil, storeErr(err)
	}
	if err != nil || rec.AccountID != acct {
		return nil, nil, fmt.Errorf("sandbox %s not found: %w", id, errdefs.ErrUnavailable)
	}
	if !sandbox.Allows(rec.State, sandbox.OpAccess) {
		return nil, nil, fmt.Errorf("sandbox %s is %s, not running: %w", id, rec.State, errdefs.ErrUnavailable)
	}
	release, err := s.calls.acquire(rec.ID, rec.AccountID)
	if err != nil {
		return nil, nil, err
	}
	agent, err := s.node.Agent(ctx, rec)
	if err != nil {
		release()
		return nil, nil, err
	}
	return agent, release, nil
}

// Authenticate checks an API key and returns its account's id.
func (s *Server) Authenticate(ctx context.Context, key string) (string, error) {
	a, err := s.store.AccountByKeyHash(ctx, HashKey(key))
	if err != nil {
		return "", err
	}
	return a.ID, nil
}
