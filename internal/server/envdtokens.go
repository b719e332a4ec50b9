package server

import (
	"context"
	"fmt"
	"time"

	"github.com/zeish/zeish/errdefs"
)

// E2B's signed URLs (internal/e2b): the SDK signs a file's URL with a hash
// of the sandbox's access token, so the server must be able to name the
// tokens it may have been made with. The facade gives its tokens expiries
// on whole hours (IssueTokenUntil), and asks for the tokens each live API
// key of the sandbox's account would carry for each of those expiries
// (SandboxTokens): a few dozen HMACs, no token kept anywhere.

// IssueTokenUntil is IssueToken with its expiry given.
func (s *Server) IssueTokenUntil(ctx context.Context, sandboxID, apiKey string, exp time.Time) (string, error) {
	key, err := s.store.KeyByHash(ctx, HashKey(apiKey))
	if err != nil {
		return "", err
	}
	rec, err := s.store.GetSandbox(ctx, sandboxID)
	if err != nil || rec.AccountID != key.AccountID {
		return "", fmt.Errorf("sandbox %s not found: %w", sandboxID, errdefs.ErrNotFound)
	}
	return s.tokens.issue(sandboxID, key.AccountID, key.ID, exp.UTC().Truncate(time.Second)), nil
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
			out = append(out, s.tokens.issue(id, rec.AccountID, k.ID, exp.UTC().Truncate(time.Second)))
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
