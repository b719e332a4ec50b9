package server

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/sandbox"
)

// A front end (E2B's, which asks for tokens that open envd and the ports)
// gets no data-plane token that outlives the native API's longest, an
// hour, whatever it asks for.
func TestIssueTokenAtMostAnHour(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "zeish.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keyPath, err := EnsureAdmin(ctx, st, dir)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := readKeyFile(keyPath)
	acct, err := st.AccountByKeyHash(ctx, HashKey(key))
	if err != nil {
		t.Fatal(err)
	}
	sb := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: sandbox.NewID(sandbox.PrefixSandbox), Name: "a", AccountID: acct.ID,
		State: sandbox.StateRunning, CreatedAt: time.Now()}}
	if err := st.CreateSandboxes(ctx, sb); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Store: st, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, ask := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour} {
		before := time.Now()
		tok, err := s.IssueToken(ctx, sb.ID, key, ask)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.tokens.verify(tok, sb.ID, time.Now()); err != nil {
			t.Fatalf("%s: %v", ask, err)
		}
		parts := strings.Split(strings.TrimPrefix(tok, tokenPrefix), ".")
		exp, _ := strconv.ParseInt(parts[3], 10, 64)
		lasts := time.Unix(exp, 0).Sub(before.Truncate(time.Second))
		if want := min(ask, maxTokenTTL); lasts > want {
			t.Errorf("asked for %s: the token lasts %s, want at most %s", ask, lasts, want)
		}
	}
}
