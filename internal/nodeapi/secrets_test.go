package nodeapi

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/secrets"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/sandbox"
)

// A node agent's store holds no secrets key: the secrets it shows are the
// ones the control plane delivered, the rows it writes carry the sealed
// form the control plane made (which the control plane opens), and a
// sandbox whose secrets were never delivered reads without them.
func TestDeliveredSecrets(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	box, err := secrets.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "zeish.db")
	control, err := sqlite.Open(ctx, db, sqlite.WithSecrets(box))
	if err != nil {
		t.Fatal(err)
	}
	defer control.Close()
	shared, err := sqlite.Open(ctx, db) // the node's: no key
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	node := NewDelivered(shared)

	env := map[string]string{"TOKEN": "s3cret"}
	rec := func(id string) *store.SandboxRecord {
		return &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: id, AccountID: "acc_a", State: sandbox.StateStarting,
			CreatedAt: time.Now().UTC(), MemoryMiB: 256}, SecretEnv: env}
	}
	// Without the sealed form the node cannot record a sandbox's secrets.
	if err := node.CreateSandboxes(ctx, rec("sbx_1")); err == nil {
		t.Fatal("a new sandbox with secrets and no sealed form was recorded")
	}
	sealed, err := (store.Codec{Secrets: box}).Seal("sbx_1", env)
	if err != nil {
		t.Fatal(err)
	}
	node.giveSealed("sbx_1", env, sealed)
	r := rec("sbx_1")
	if err := node.CreateSandboxes(ctx, r); err != nil {
		t.Fatal(err)
	}
	if r.SecretEnv["TOKEN"] != "s3cret" {
		t.Fatalf("the node's record lost its secrets: %+v", r.SecretEnv)
	}
	// The node sees them; the raw store (no key) does not.
	if got, err := node.GetSandbox(ctx, "sbx_1"); err != nil || got.SecretEnv["TOKEN"] != "s3cret" || got.SecretsUnreadable() {
		t.Fatalf("node read: %+v %v", got, err)
	}
	if got, _ := shared.GetSandbox(ctx, "sbx_1"); len(got.SecretEnv) != 0 || !got.SecretsUnreadable() {
		t.Fatalf("the keyless store opened secrets: %+v", got.SecretEnv)
	}
	// A node's write keeps them sealed as they were; the control plane opens them.
	if _, err := node.UpdateSandbox(ctx, "sbx_1", func(r *store.SandboxRecord) error {
		if r.SecretEnv["TOKEN"] != "s3cret" {
			t.Errorf("update sees %+v", r.SecretEnv)
		}
		r.State = sandbox.StateRunning
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, err := control.GetSandbox(ctx, "sbx_1"); err != nil || got.SecretEnv["TOKEN"] != "s3cret" || got.State != sandbox.StateRunning {
		t.Fatalf("control plane read: %+v %v", got, err)
	}
	// A node that restarted has nothing delivered: the sandbox reads
	// without its secrets until an operation brings them.
	again := NewDelivered(shared)
	if got, _ := again.GetSandbox(ctx, "sbx_1"); len(got.SecretEnv) != 0 || !got.SecretsUnreadable() {
		t.Fatalf("a restarted node shows %+v", got.SecretEnv)
	}
	again.give("sbx_1", env)
	if list, _ := again.ListSandboxes(ctx, store.SandboxFilter{}); len(list) != 1 || list[0].SecretEnv["TOKEN"] != "s3cret" {
		t.Fatalf("after a start delivered them: %+v", list)
	}
	again.forget("sbx_1")
	if got, _ := again.SandboxByName(ctx, "acc_a", "sbx_1"); len(got.SecretEnv) != 0 {
		t.Fatalf("after a delete: %+v", got.SecretEnv)
	}
}
