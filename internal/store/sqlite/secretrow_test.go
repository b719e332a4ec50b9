package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/zeish/zeish/internal/secrets"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/sandbox"
)

// One row whose secrets this store cannot open does not break listing:
// every sandbox is listed, that one marked.
func TestListWithAnUndecryptableSecretRow(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "zeish.db")
	old, _ := secrets.LoadOrCreate(t.TempDir())
	cur, _ := secrets.LoadOrCreate(t.TempDir())
	s, err := sqlite.Open(ctx, path, sqlite.WithSecrets(old))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandboxes(ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_1", Name: "sealed-by-old", AccountID: "acc_1", State: sandbox.StateRunning},
		SecretEnv: map[string]string{"K": "v"}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = sqlite.Open(ctx, path, sqlite.WithSecrets(cur))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateSandboxes(ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_2", Name: "fine", AccountID: "acc_1", State: sandbox.StateRunning},
		SecretEnv: map[string]string{"K": "w"}}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListSandboxes(ctx, store.SandboxFilter{AccountID: "acc_1"})
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %d sandboxes, %v", len(list), err)
	}
	for _, r := range list {
		if want := r.ID == "sbx_1"; r.SecretsUnreadable() != want {
			t.Errorf("%s: unreadable %v, want %v", r.ID, r.SecretsUnreadable(), want)
		}
	}
}
