package testenv

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/zeish/zeish/internal/secrets"
	"github.com/zeish/zeish/internal/store/sqlite"
)

// SQLite opens a fresh SQLite store in t's temp dir, sealing secrets with a
// key of its own, and closes it when t ends.
func SQLite(t testing.TB) *sqlite.Store {
	t.Helper()
	st, _ := SQLiteSealed(t)
	return st
}

// SQLiteSealed is SQLite with the key that seals its secrets, for a test
// that seals or opens them as a control plane does.
func SQLiteSealed(t testing.TB) (*sqlite.Store, *secrets.Box) {
	t.Helper()
	dir := t.TempDir()
	box, err := secrets.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "zeish.db"), sqlite.WithSecrets(box))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, box
}
