package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/sandbox"
)

// Revoking an API key ends the data-plane tokens it asked for at once,
// not when they expire; tokens of the account's other keys live on.
func TestRevokedKeyEndsItsTokens(t *testing.T) {
	ctx := context.Background()
	st, dir := sqliteStore(t)
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
	s, err := New(Options{Store: st, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()

	tokens := map[string]string{} // key id → token
	for id, key := range keys {
		req, _ := http.NewRequest("POST", ts.URL+api.BasePath+"/public/sandboxes/"+sb.ID+"/access", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var a api.Access
		json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if resp.StatusCode != 200 || a.Token == "" {
			t.Fatalf("access: %d", resp.StatusCode)
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
	req, _ := http.NewRequest("GET", ts.URL+api.DataPath+"/sandboxes/"+sb.ID+"/files/stat?path=/", nil)
	req.Header.Set("Authorization", "Bearer "+tokens[revoked])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e api.ErrorBody
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 401 || e.Error.Code != "unauthenticated" {
		t.Fatalf("token of a revoked key: %d %+v, want 401 unauthenticated", resp.StatusCode, e.Error)
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
	st, dir := sqliteStore(t)
	s, err := New(Options{Store: st, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	adminPath, err := EnsureAdmin(ctx, st, dir)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := readKeyFile(adminPath)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	call := func(method, path, key string) (int, []byte) {
		req, _ := http.NewRequest(method, ts.URL+api.BasePath+path, strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b []byte
		b, _ = io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	acct := sandbox.NewID(sandbox.PrefixAccount)
	if err := st.CreateAccount(ctx, store.Account{ID: acct, Name: "team", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	code, body := call("POST", "/admin/accounts/"+acct+"/keys", admin)
	var made api.CreatedAPIKey
	if code != http.StatusCreated || json.Unmarshal(body, &made) != nil {
		t.Fatalf("create key: %d %s", code, body)
	}
	if want, _ := api.E2BKey(made.Key); made.E2BKey != want || want == "" {
		t.Fatalf("created key's E2B form %q, want %q", made.E2BKey, want)
	}
	for _, key := range []string{made.Key, made.E2BKey} {
		if code, body := call("GET", "/public/sandboxes", key); code != http.StatusOK {
			t.Fatalf("%s…: %d %s", key[:6], code, body)
		}
	}
	if a, err := s.Authenticate(ctx, made.E2BKey); err != nil || a != acct {
		t.Fatalf("Authenticate(E2B form) = %q, %v; want %s", a, err, acct)
	}
	if code, _ := call("DELETE", "/admin/keys/"+made.ID, admin); code != http.StatusOK {
		t.Fatalf("revoke: %d", code)
	}
	for _, key := range []string{made.Key, made.E2BKey} {
		if code, _ := call("GET", "/public/sandboxes", key); code != http.StatusUnauthorized {
			t.Errorf("%s… after revoking: %d, want 401", key[:6], code)
		}
	}
}

// sqliteStore is a fresh SQLite store in a test's own data dir.
func sqliteStore(t *testing.T) (store.Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "zeish.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, dir
}
