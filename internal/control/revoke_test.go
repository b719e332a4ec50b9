package control

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
)

// Revoking an API key ends the data-plane tokens it asked for at once,
// not when they expire; tokens of the account's other keys live on.
func TestRevokedKeyEndsItsTokens(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := testenv.SQLite(t)
	acct := sandbox.NewID(sandbox.PrefixAccount)
	if err := st.CreateAccount(ctx, store.Account{ID: acct, Name: "team", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{} // key id → key
	for i := 0; i < 2; i++ {
		key, hash := NewAPIKey()
		id := sandbox.NewID(sandbox.PrefixKey)
		if err := st.CreateAPIKey(ctx, store.APIKey{ID: id, AccountID: acct, Hash: hash, Prefix: key[:8], CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		keys[id] = key
	}
	sb := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: sandbox.NewID(sandbox.PrefixSandbox), Name: "a", AccountID: acct,
		State: sandbox.StateRunning, CreatedAt: time.Now()}}
	if err := st.CreateSandboxes(ctx, sb); err != nil {
		t.Fatal(err)
	}
	key, err := TokenKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Store: st, TokenKey: key})
	tokens := map[string]string{} // key id → token
	for id, key := range keys {
		who, err := s.Authenticate(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.Access(ctx, who, sb.ID, api.AccessRequest{}, "http://x/data/v1")
		if err != nil || a.Token == "" {
			t.Fatalf("access: %v", err)
		}
		tokens[id] = a.Token
	}
	var revoked, kept string
	for id := range keys {
		if revoked == "" {
			revoked = id
		} else {
			kept = id
		}
	}
	if _, err := st.RevokeAPIKey(ctx, revoked, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.tokenTarget(ctx, tokens[revoked], sb.ID); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("token of a revoked key: %v, want unauthenticated", err)
	}
	// The other key's token still verifies and its key is live.
	a, k, err := s.tokens.verify(tokens[kept], sb.ID, time.Now())
	if err != nil || a != acct || k != kept || s.keyLive(ctx, a, k) != nil {
		t.Fatalf("token of the live key: %s %s %v", a, k, err)
	}
	// A token from before key ids (4 parts) is refused, not misread.
	old := tokenPrefix + sb.ID + "." + acct + ".9999999999." + s.tokens.mac(sb.ID+"."+acct+".9999999999")
	if _, _, err := s.tokens.verify(old, sb.ID, time.Now()); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("old-format token: %v", err)
	}
}

// A key's E2B form (what E2B's SDKs before 2.46 accept) opens the same
// account as the key, and revoking the key closes it too.
func TestE2BFormOfAKey(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := testenv.SQLite(t)
	s := New(Options{Store: st})
	adminPath, err := EnsureAdmin(ctx, st, dir)
	if err != nil {
		t.Fatal(err)
	}
	adminKey, err := readKeyFile(adminPath)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := s.Authenticate(ctx, adminKey)
	if err != nil {
		t.Fatal(err)
	}
	acct := sandbox.NewID(sandbox.PrefixAccount)
	if err := st.CreateAccount(ctx, store.Account{ID: acct, Name: "team", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	made, err := s.CreateKey(ctx, admin, acct)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := api.E2BKey(made.Key); made.E2BKey != want || want == "" {
		t.Fatalf("created key's E2B form %q, want %q", made.E2BKey, want)
	}
	for _, key := range []string{made.Key, made.E2BKey} {
		if who, err := s.Authenticate(ctx, key); err != nil || who.Account.ID != acct {
			t.Fatalf("%s…: %+v, %v; want %s", key[:6], who, err, acct)
		}
	}
	if _, err := s.RevokeKey(ctx, admin, made.ID); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{made.Key, made.E2BKey} {
		if _, err := s.Authenticate(ctx, key); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("%s… after revoking: %v, want unauthenticated", key[:6], err)
		}
	}
}

// E2B's signed URLs are checked against the tokens a sandbox's live keys
// would carry (SandboxTokens): a revoked key's are not among them, each
// one checks (CheckToken) for its sandbox only, and a token TokenUntil
// issued at one of the asked expiries is one of them.
func TestSandboxTokens(t *testing.T) {
	ctx := context.Background()
	st := testenv.SQLite(t)
	acct := sandbox.NewID(sandbox.PrefixAccount)
	if err := st.CreateAccount(ctx, store.Account{ID: acct, Name: "team", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; i < 2; i++ {
		key, hash := NewAPIKey()
		if err := st.CreateAPIKey(ctx, store.APIKey{ID: sandbox.NewID(sandbox.PrefixKey), AccountID: acct, Hash: hash, Prefix: key[:8], CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	var boxes []string
	for _, name := range []string{"a", "b"} {
		sb := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: sandbox.NewID(sandbox.PrefixSandbox), Name: name, AccountID: acct,
			State: sandbox.StatePaused, CreatedAt: time.Now()}}
		if err := st.CreateSandboxes(ctx, sb); err != nil {
			t.Fatal(err)
		}
		boxes = append(boxes, sb.ID)
	}
	key, err := TokenKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := New(Options{Store: st, TokenKey: key})
	exps := []time.Time{time.Now().Add(10 * time.Minute).Truncate(time.Minute), time.Now().Add(40 * time.Minute).Truncate(time.Minute)}
	who, err := c.Authenticate(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	issued, err := c.TokenUntil(ctx, who, boxes[0], exps[1])
	if err != nil {
		t.Fatal(err)
	}
	toks, err := c.SandboxTokens(ctx, boxes[0], exps)
	if err != nil || len(toks) != 4 || !slices.Contains(toks, issued) {
		t.Fatalf("two live keys, two expiries: %d tokens, %v; the issued one among them: %v", len(toks), err, slices.Contains(toks, issued))
	}
	for _, tok := range toks {
		if err := c.CheckToken(ctx, boxes[0], tok); err != nil {
			t.Errorf("a token of the sandbox's own (it is paused): %v", err)
		}
		if err := c.CheckToken(ctx, boxes[1], tok); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("a token of another sandbox: %v, want unauthenticated", err)
		}
	}
	keyID, err := c.KeyID(ctx, who)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.RevokeAPIKey(ctx, keyID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if toks, err = c.SandboxTokens(ctx, boxes[0], exps); err != nil || len(toks) != 2 || slices.Contains(toks, issued) {
		t.Fatalf("one key revoked: %d tokens, %v; the revoked key's among them: %v", len(toks), err, slices.Contains(toks, issued))
	}
	if err := c.CheckToken(ctx, boxes[0], issued); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("the revoked key's token: %v, want unauthenticated", err)
	}
	if _, err := c.SandboxTokens(ctx, sandbox.NewID(sandbox.PrefixSandbox), exps); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("no such sandbox: %v, want not_found", err)
	}
}

// A front end (E2B's, which asks for tokens that open envd and the ports)
// gets no data-plane token that outlives the native API's longest,
// MaxTokenTTL, whatever it asks for.
func TestTokenUntilAtMostAnHour(t *testing.T) {
	ctx := context.Background()
	st := testenv.SQLite(t)
	acct := sandbox.NewID(sandbox.PrefixAccount)
	if err := st.CreateAccount(ctx, store.Account{ID: acct, Name: "team", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	secret, hash := NewAPIKey()
	if err := st.CreateAPIKey(ctx, store.APIKey{ID: sandbox.NewID(sandbox.PrefixKey), AccountID: acct, Hash: hash, Prefix: secret[:8], CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	sb := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: sandbox.NewID(sandbox.PrefixSandbox), Name: "a", AccountID: acct, State: sandbox.StateRunning, CreatedAt: time.Now()}}
	if err := st.CreateSandboxes(ctx, sb); err != nil {
		t.Fatal(err)
	}
	key, err := TokenKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := New(Options{Store: st, TokenKey: key})
	who, err := c.Authenticate(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	for _, ask := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour} {
		before := time.Now()
		tok, err := c.TokenUntil(ctx, who, sb.ID, before.Add(ask))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.tokens.verify(tok, sb.ID, time.Now()); err != nil {
			t.Fatalf("%s: %v", ask, err)
		}
		parts := strings.Split(strings.TrimPrefix(tok, tokenPrefix), ".")
		exp, _ := strconv.ParseInt(parts[3], 10, 64)
		if lasts, want := time.Unix(exp, 0).Sub(before.Truncate(time.Second)), min(ask, MaxTokenTTL); lasts > want {
			t.Errorf("asked for %s: the token lasts %s, want at most %s", ask, lasts, want)
		}
	}
}
