package server

import (
	"context"
	"fmt"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// E2B's signed URLs (internal/e2b): the SDK signs a file's URL with a hash
// of the sandbox's access token, so the server must be able to name the
// tokens it may have been made with. The facade gives its tokens expiries
// on whole hours (IssueTokenUntil), and asks for the tokens each live API
// key of the sandbox's account would carry for each of those expiries
// (SandboxTokens): a few dozen HMACs, no token kept anywhere.

// IssueTokenUntil signs a data-plane token for one sandbox that expires at
// exp, issued to the live API key apiKey, whose account must own the
// sandbox. No front end hands out a token that outlives the native API's
// longest: an exp further away is brought in to an hour from now.
func (s *Server) IssueTokenUntil(ctx context.Context, sandboxID, apiKey string, exp time.Time) (string, error) {
	key, err := s.store.KeyByHash(ctx, HashKey(apiKey))
	if err != nil {
		return "", err
	}
	rec, err := s.store.GetSandbox(ctx, sandboxID)
	if err != nil || rec.AccountID != key.AccountID {
		return "", fmt.Errorf("sandbox %s not found: %w", sandboxID, errdefs.ErrNotFound)
	}
	if longest := time.Now().Add(maxTokenTTL); exp.After(longest) {
		exp = longest
	}
	return s.tokens.issue(rec, key.ID, exp.UTC().Truncate(time.Second)), nil
}

// SandboxTokens lists the data-plane tokens of sandbox id that expire at
// one of exps, one for each live API key of its account (errdefs.ErrNotFound
// when there is no such sandbox). Handing them out would hand out access:
// they are for checking signatures made with them.
func (s *Server) SandboxTokens(ctx context.Context, id string, exps []time.Time) ([]string, error) {
	rec, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	keys, err := s.store.ListAPIKeys(ctx, rec.AccountID)
	if err != nil {
		return nil, storeErr(err)
	}
	var out []string
	for _, k := range keys {
		if k.RevokedAt != nil {
			continue
		}
		for _, exp := range exps {
			out = append(out, s.tokens.issue(rec, k.ID, exp.UTC().Truncate(time.Second)))
		}
	}
	return out, nil
}

// CheckToken checks a data-plane token of sandbox id whatever the sandbox's
// state (E2B's getMetrics reads a paused sandbox's samples).
func (s *Server) CheckToken(ctx context.Context, id, token string) error {
	acct, err := s.checkToken(ctx, token, id)
	if err != nil {
		return err
	}
	rec, err := s.store.GetSandbox(ctx, id)
	if err != nil && !errdefs.Is(err, errdefs.ClassNotFound) {
		return storeErr(err)
	}
	if err != nil || rec.AccountID != acct {
		return fmt.Errorf("sandbox %s not found: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

// Sandbox reads sandbox id whoever's it is (E2B's auto-resume decides from
// its state and lifecycle before a caller is known).
func (s *Server) Sandbox(ctx context.Context, id string) (sandbox.Sandbox, error) {
	rec, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	return rec.Sandbox, nil
}

// Resume resumes a paused sandbox as its owner's own resume would (the
// control plane admits it: a running slot), waits until it runs and gives
// it timeoutSeconds from then: E2B's auto-resume, for traffic that reached
// the sandbox.
func (s *Server) Resume(ctx context.Context, id string, timeoutSeconds int) error {
	rec, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	if rec, err = s.control.Lifecycle(ctx, sandbox.OpResume, rec); err != nil {
		return err
	}
	if rec, err = s.node.Wait(ctx, rec.ID, ""); err != nil {
		return err
	}
	if !rec.State.Configured() { // not running: the resume failed
		return fmt.Errorf("sandbox %s is %s after resuming: %s: %w", id, rec.State, rec.ErrorMessage, errdefs.ErrUnavailable)
	}
	at, _, err := resolveTimeout(timeoutSeconds, "", time.Now())
	if err != nil {
		return err
	}
	_, err = s.store.UpdateSandbox(ctx, id, func(x *store.SandboxRecord) error {
		if _, err := sandbox.NextFor(x.ID, x.State, sandbox.OpSetTimeout); err != nil {
			return err
		}
		x.TimeoutAt = at
		return nil
	})
	return err
}
