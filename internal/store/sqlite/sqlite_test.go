package sqlite_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/zeish/zeish/internal/secrets"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/internal/store/storetest"
	"github.com/zeish/zeish/sandbox"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

func BenchmarkList(b *testing.B) { storetest.BenchmarkList(b, open(b)) }

func open(t testing.TB) store.Store {
	box, err := secrets.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "zeish.db"), sqlite.WithSecrets(box))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "zeish.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAccount(ctx, store.Account{ID: "acc_1", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetAccount(ctx, "acc_1"); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
}

// TestSecretsSealedOnDisk: a secret never reaches the database file in the
// clear, and the store without the key refuses to write one.
func TestSecretsSealedOnDisk(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "zeish.db")
	box, err := secrets.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(ctx, path, sqlite.WithSecrets(box))
	if err != nil {
		t.Fatal(err)
	}
	const secret = "plaintext-canary-7f3a"
	r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_1", Name: "one", AccountID: "acc_1", State: sandbox.StateStarting},
		SecretEnv: map[string]string{"API_TOKEN": secret}}
	if err := s.CreateSandboxes(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateSandbox(ctx, "sbx_1", func(r *store.SandboxRecord) error { r.State = sandbox.StateRunning; return nil }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, f := range []string{path, path + "-wal"} {
		b, _ := os.ReadFile(f)
		if bytes.Contains(b, []byte(secret)) {
			t.Fatalf("%s holds the secret in the clear", f)
		}
	}
	s, err = sqlite.Open(ctx, path, sqlite.WithSecrets(box))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.GetSandbox(ctx, "sbx_1"); err != nil || got.SecretEnv["API_TOKEN"] != secret {
		t.Fatalf("after reopen: %+v %v", got, err)
	}
	bare, err := sqlite.Open(ctx, filepath.Join(dir, "bare.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if err := bare.CreateSandboxes(ctx, r); err == nil {
		t.Fatal("a store without a secrets key wrote a secret")
	}
}

// TestLegacySecretsSealed: a row written before secrets were sealed is
// sealed when a store with a key opens the file, and reads back the same.
func TestLegacySecretsSealed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "zeish.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandboxes(ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_1", Name: "one", AccountID: "acc_1"}}); err != nil {
		t.Fatal(err)
	}
	const secret = "legacy-canary-93c1"
	if err := s.ExecForTest(ctx, `UPDATE sandboxes SET data = json_set(data, '$.secret_env', json_object('K', ?)) WHERE id = 'sbx_1'`, secret); err != nil {
		t.Fatal(err)
	}
	s.Close()
	box, _ := secrets.LoadOrCreate(dir)
	s, err = sqlite.Open(ctx, path, sqlite.WithSecrets(box))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.GetSandbox(ctx, "sbx_1"); err != nil || got.SecretEnv["K"] != secret {
		t.Fatalf("after sealing: %+v %v", got, err)
	}
	for _, f := range []string{path, path + "-wal"} {
		if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(secret)) {
			t.Fatalf("%s still holds the legacy secret in the clear", f)
		}
	}
}
