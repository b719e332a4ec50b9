package control

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Data-plane tokens are "zdp_<sandbox>.<account>.<api key id>.<unix
// expiry>.<mac>": signed with a key kept in the data dir. They die with
// their expiry, with the sandbox, and with the API key that asked for them
// (checkToken checks both: a revoked key's tokens stop at once).
const tokenPrefix = "zdp_"

// Token lifetimes.
const (
	DefaultTokenTTL = 15 * time.Minute
	MaxTokenTTL     = time.Hour
)

type tokenSigner struct {
	key []byte
	// keyFor, when set, is the key of the sandboxes of node host: a
	// control plane signs each node's tokens with that node's own key
	// (internal/cluster's DataPlaneKey), so no node can mint a token
	// another node accepts.
	keyFor func(host string) []byte
}

// keyOf is the key of the tokens of sandbox r.
func (t tokenSigner) keyOf(r *store.SandboxRecord) []byte {
	if t.keyFor != nil {
		return t.keyFor(r.Host)
	}
	return t.key
}

// TokenKey is the data dir's data-plane token key, made on first use: a
// control plane hands it to its node agents at registration, replicas
// share it.
func TokenKey(dataDir string) ([]byte, error) {
	path := filepath.Join(dataDir, "token.key")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		b = make([]byte, 32)
		rand.Read(b)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, fmt.Errorf("write token key: %w", err)
		}
	} else if err != nil {
		return nil, err
	}
	if len(b) < 32 {
		return nil, fmt.Errorf("%s is too short", path)
	}
	return b, nil
}

func (t tokenSigner) mac(payload string) string { return macWith(t.key, payload) }

func macWith(key []byte, payload string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// issue signs a token for sandbox r, of its account, issued to API key keyID.
func (t tokenSigner) issue(r *store.SandboxRecord, keyID string, exp time.Time) string {
	payload := fmt.Sprintf("%s.%s.%s.%d", r.ID, r.AccountID, keyID, exp.Unix())
	return tokenPrefix + payload + "." + macWith(t.keyOf(r), payload)
}

// verify checks a token for sandboxID and returns its account and the API
// key that asked for it.
func (t tokenSigner) verify(token, sandboxID string, now time.Time) (accountID, keyID string, err error) {
	return t.verifyWith(t.key, token, sandboxID, now)
}

func (t tokenSigner) verifyWith(key []byte, token, sandboxID string, now time.Time) (accountID, keyID string, err error) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 5 {
		return "", "", fmt.Errorf("malformed data-plane token: %w", errdefs.ErrUnauthenticated)
	}
	payload := strings.Join(parts[:4], ".")
	if !hmac.Equal([]byte(parts[4]), []byte(macWith(key, payload))) {
		return "", "", fmt.Errorf("data-plane token signature is not valid: %w", errdefs.ErrUnauthenticated)
	}
	if parts[0] != sandboxID {
		return "", "", fmt.Errorf("this data-plane token is for another sandbox: %w", errdefs.ErrUnauthenticated)
	}
	exp, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil || strconv.FormatInt(exp, 10) != parts[3] { // only as issue writes it
		return "", "", fmt.Errorf("malformed data-plane token: %w", errdefs.ErrUnauthenticated)
	}
	if now.Unix() >= exp {
		return "", "", fmt.Errorf("data-plane token expired at %s: %w", time.Unix(exp, 0).UTC().Format(time.RFC3339), errdefs.ErrTokenExpired)
	}
	return parts[1], parts[2], nil
}

// checkToken verifies a data-plane token for sandboxID and that the API key
// it was issued to is still live; it returns the token's account.
func (c *Control) checkToken(ctx context.Context, token, sandboxID string) (string, error) {
	key := c.tokens.key
	if c.tokens.keyFor != nil {
		if r, err := c.store.GetSandbox(ctx, sandboxID); err == nil {
			key = c.tokens.keyOf(r)
		}
	}
	acct, keyID, err := c.tokens.verifyWith(key, token, sandboxID, time.Now())
	if err == nil {
		err = c.keyLive(ctx, acct, keyID)
	}
	return acct, err
}

// keyLive checks that the API key a token was issued to is not revoked.
func (c *Control) keyLive(ctx context.Context, accountID, keyID string) error {
	keys, err := c.store.ListAPIKeys(ctx, accountID)
	if err != nil {
		return storeErr(err)
	}
	for _, k := range keys {
		if k.ID == keyID && k.RevokedAt == nil {
			return nil
		}
	}
	return fmt.Errorf("the API key this data-plane token was issued to is revoked: %w", errdefs.ErrUnauthenticated)
}

// Token signs a data-plane token of sandbox id (the caller's) for ttl,
// issued to the caller's API key.
func (c *Control) Token(ctx context.Context, who Caller, id string, ttl time.Duration) (string, time.Time, error) {
	exp := time.Now().Add(ttl).UTC().Truncate(time.Second)
	tok, err := c.TokenUntil(ctx, who, id, exp)
	return tok, exp, err
}

// TokenUntil signs a data-plane token of sandbox id (the caller's) that
// expires at exp, issued to the caller's API key. No front end hands out a
// token that outlives the native API's longest: an exp further away than
// MaxTokenTTL is brought in to that.
func (c *Control) TokenUntil(ctx context.Context, who Caller, id string, exp time.Time) (string, error) {
	if longest := time.Now().Add(MaxTokenTTL); exp.After(longest) {
		exp = longest
	}
	r, err := c.store.GetSandbox(ctx, id)
	if err != nil || r.AccountID != who.Account.ID {
		return "", fmt.Errorf("sandbox %s not found: %w", id, errdefs.ErrNotFound)
	}
	keyID, err := c.KeyID(ctx, who)
	if err != nil {
		return "", err
	}
	return c.tokens.issue(r, keyID, exp.UTC().Truncate(time.Second)), nil
}

// E2B's signed URLs (internal/e2b's sign.go): the SDK signs a file's URL
// with a hash of the sandbox's access token, so the application must be
// able to name the tokens it may have been made with. The facade gives its
// tokens expiries on whole hours (TokenUntil), and asks for the tokens each
// live API key of the sandbox's account would carry for each of those
// expiries (SandboxTokens): a few dozen HMACs, no token kept anywhere.

// SandboxTokens lists the data-plane tokens of sandbox id that expire at
// one of exps, one for each live API key of its account (errdefs.ErrNotFound
// when there is no such sandbox). Handing them out would hand out access:
// they are for checking signatures made with them.
func (c *Control) SandboxTokens(ctx context.Context, id string, exps []time.Time) ([]string, error) {
	r, err := c.store.GetSandbox(ctx, id)
	if err != nil {
		return nil, storeErr(err)
	}
	keys, err := c.store.ListAPIKeys(ctx, r.AccountID)
	if err != nil {
		return nil, storeErr(err)
	}
	var out []string
	for _, k := range keys {
		if k.RevokedAt != nil {
			continue
		}
		for _, exp := range exps {
			out = append(out, c.tokens.issue(r, k.ID, exp.UTC().Truncate(time.Second)))
		}
	}
	return out, nil
}

// CheckToken checks a data-plane token of sandbox id whatever the
// sandbox's state (E2B's getMetrics reads a paused sandbox's samples).
func (c *Control) CheckToken(ctx context.Context, id, token string) error {
	acct, err := c.checkToken(ctx, token, id)
	if err != nil {
		return err
	}
	r, err := c.store.GetSandbox(ctx, id)
	if err != nil && !errdefs.Is(err, errdefs.ClassNotFound) {
		return storeErr(err)
	}
	if err != nil || r.AccountID != acct {
		return fmt.Errorf("sandbox %s not found: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

// dataPlaneLocator is a Node whose sandboxes' data plane is served
// elsewhere (the cluster's Router: on each sandbox's node).
type dataPlaneLocator interface {
	DataURL(ctx context.Context, r *store.SandboxRecord) (string, error)
}

// DataURL is where sandbox sb's data plane is served: on its node in a
// cluster, else under base (this server's data plane, e.g.
// https://zeish.example/data/v1).
func (c *Control) DataURL(ctx context.Context, sb sandbox.Sandbox, base string) (string, error) {
	if d, ok := c.node.(dataPlaneLocator); ok {
		return d.DataURL(ctx, &store.SandboxRecord{Sandbox: sb})
	}
	return strings.TrimSuffix(base, "/") + "/sandboxes/" + sb.ID, nil
}

// Access is POST …/access: a data-plane URL and token of the caller's
// sandbox ref, for req.TTLSeconds (default 15 minutes, at most an hour),
// while the sandbox may be reached (the lifecycle's access).
func (c *Control) Access(ctx context.Context, who Caller, ref string, req api.AccessRequest, base string) (api.Access, error) {
	ttl := DefaultTokenTTL
	if req.TTLSeconds != 0 {
		ttl = time.Duration(req.TTLSeconds) * time.Second
	}
	if ttl <= 0 || ttl > MaxTokenTTL {
		return api.Access{}, invalid("ttl_seconds must be within 1..%d", int(MaxTokenTTL.Seconds()))
	}
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return api.Access{}, err
	}
	if _, err := sandbox.NextFor(r.ID, r.State, sandbox.OpAccess); err != nil {
		return api.Access{}, err
	}
	keyID, err := c.KeyID(ctx, who)
	if err != nil {
		return api.Access{}, err
	}
	url, err := c.DataURL(ctx, r.Sandbox, base)
	if err != nil {
		return api.Access{}, err
	}
	exp := time.Now().Add(ttl).UTC().Truncate(time.Second)
	return api.Access{URL: url, Token: c.tokens.issue(r, keyID, exp), ExpiresAt: exp}, nil
}
