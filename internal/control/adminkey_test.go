package control

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testenv"
)

// A restart after the key in admin.key was revoked starts: the key stays
// revoked and admin.key holds a fresh admin key that works. Other restarts
// keep admin.key as it is.
func TestEnsureAdminAfterItsKeyIsRevoked(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := testenv.SQLite(t)
	keyPath, err := EnsureAdmin(ctx, st, dir)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := readKeyFile(keyPath)
	if _, err := EnsureAdmin(ctx, st, dir); err != nil {
		t.Fatalf("second start: %v", err)
	}
	if again, _ := readKeyFile(keyPath); again != first {
		t.Fatal("a restart replaced a live admin key")
	}
	k, err := st.KeyByHash(ctx, HashKey(first))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.RevokeAPIKey(ctx, k.ID, time.Now()); err != nil {
		t.Fatal(err)
	}

	if _, err := EnsureAdmin(ctx, st, dir); err != nil {
		t.Fatalf("start after admin.key's key was revoked: %v", err)
	}
	if _, err := st.AccountByKeyHash(ctx, HashKey(first)); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("the revoked key opens an account again: %v", err)
	}
	fresh, err := readKeyFile(keyPath)
	if err != nil || fresh == first {
		t.Fatalf("admin.key after the restart: %v (same key: %v)", err, fresh == first)
	}
	a, err := st.AccountByKeyHash(ctx, HashKey(fresh))
	if err != nil || !a.Admin {
		t.Fatalf("the new key in admin.key: account %+v, %v", a, err)
	}
	if fi, err := os.Stat(keyPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin.key mode: %v %v", fi.Mode(), err)
	}
}
