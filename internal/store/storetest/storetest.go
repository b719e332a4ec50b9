// Package storetest is the conformance suite every store.Store implementation runs.
package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Run runs the suite; open returns a new, empty store each call.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("accounts and keys", func(t *testing.T) { testAccounts(t, open(t)) })
	t.Run("templates", func(t *testing.T) { testTemplates(t, open(t)) })
	t.Run("sandboxes", func(t *testing.T) { testSandboxes(t, open(t)) })
	t.Run("snapshots", func(t *testing.T) { testSnapshots(t, open(t)) })
	t.Run("key lifecycle", func(t *testing.T) { testKeys(t, open(t)) })
	t.Run("secrets and metering", func(t *testing.T) { testSecretsAndMetering(t, open(t)) })
	t.Run("quotas", func(t *testing.T) { testQuotas(t, open(t)) })
	t.Run("leases", func(t *testing.T) { testLeases(t, open(t)) })
	t.Run("nodes", func(t *testing.T) { testNodes(t, open(t)) })
	t.Run("account secrets", func(t *testing.T) { testAccountSecrets(t, open(t)) })
}

func testKeys(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	for _, a := range []store.Account{{ID: "acc_1", Name: "one", CreatedAt: now}, {ID: "acc_2", Name: "two", CreatedAt: now.Add(time.Second)}} {
		if err := s.CreateAccount(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if list, err := s.ListAccounts(ctx); err != nil || len(list) != 2 || list[0].ID != "acc_1" {
		t.Fatalf("ListAccounts = %+v, %v", list, err)
	}
	s.CreateAPIKey(ctx, store.APIKey{ID: "key_1", AccountID: "acc_1", Hash: "h1", Prefix: "zk_1", CreatedAt: now})
	s.CreateAPIKey(ctx, store.APIKey{ID: "key_2", AccountID: "acc_2", Hash: "h2", Prefix: "zk_2", CreatedAt: now})
	if k, err := s.KeyByHash(ctx, "h2"); err != nil || k.ID != "key_2" || k.AccountID != "acc_2" {
		t.Fatalf("KeyByHash = %+v, %v", k, err)
	}
	if list, _ := s.ListAPIKeys(ctx, "acc_1"); len(list) != 1 || list[0].ID != "key_1" {
		t.Fatalf("ListAPIKeys(acc_1) = %+v", list)
	}
	if list, _ := s.ListAPIKeys(ctx, ""); len(list) != 2 {
		t.Fatalf("ListAPIKeys() = %+v", list)
	}
	k, err := s.RevokeAPIKey(ctx, "key_1", now)
	if err != nil || k.RevokedAt == nil {
		t.Fatalf("revoke: %+v %v", k, err)
	}
	if _, err := s.AccountByKeyHash(ctx, "h1"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("revoked key still opens: %v", err)
	}
	if _, err := s.KeyByHash(ctx, "h1"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("revoked key still found: %v", err)
	}
	if _, err := s.RevokeAPIKey(ctx, "key_x", now); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
}

func testSecretsAndMetering(t *testing.T, s store.Store) {
	ctx := context.Background()
	t0 := time.Now().UTC().Add(-time.Hour)
	r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_s", Name: "s", AccountID: "acc_1", State: sandbox.StateStarting, CreatedAt: t0},
		SecretEnv: map[string]string{"TOKEN": "s3cr3t"}}
	if err := s.CreateSandboxes(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSandbox(ctx, "sbx_s")
	if err != nil || got.SecretEnv["TOKEN"] != "s3cr3t" || len(got.Running) != 0 {
		t.Fatalf("GetSandbox = %+v, %v", got, err)
	}
	setState := func(st sandbox.State) *store.SandboxRecord {
		r, err := s.UpdateSandbox(ctx, "sbx_s", func(r *store.SandboxRecord) error { r.State = st; return nil })
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := setState(sandbox.StateRunning); len(r.Running) != 1 || r.Running[0].End != nil {
		t.Fatalf("running: intervals %+v", r.Running)
	}
	setState(sandbox.StateRunning) // no new interval while it stays running
	if r := setState(sandbox.StateStopped); len(r.Running) != 1 || r.Running[0].End == nil {
		t.Fatalf("stopped: intervals %+v", r.Running)
	}
	setState(sandbox.StateRunning)
	if list, _ := s.ListSandboxes(ctx, store.SandboxFilter{}); len(list) != 1 || len(list[0].Running) != 2 || list[0].SecretEnv["TOKEN"] != "s3cr3t" {
		t.Fatalf("ListSandboxes = %+v", list)
	}
	for _, c := range []struct {
		since time.Time
		want  int
	}{{t0.Add(-time.Minute), 1}, {t0, 1}, {t0.Add(time.Millisecond), 0}} {
		if n, err := s.CountCreated(ctx, "acc_1", c.since); err != nil || n != c.want {
			t.Errorf("CountCreated(since %s) = %d, %v; want %d", c.since, n, err, c.want)
		}
	}
}

func testAccounts(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	if err := s.CreateAccount(ctx, store.Account{ID: "acc_1", Name: "one", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAccount(ctx, store.Account{ID: "acc_2", Name: "one", CreatedAt: now}); !errors.Is(err, errdefs.ErrNameTaken) {
		t.Fatalf("duplicate account name: got %v, want name_taken", err)
	}
	if err := s.CreateAPIKey(ctx, store.APIKey{ID: "key_1", AccountID: "acc_1", Hash: "h1", Prefix: "zk_ab", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	a, err := s.AccountByKeyHash(ctx, "h1")
	if err != nil || a.ID != "acc_1" || a.Name != "one" {
		t.Fatalf("AccountByKeyHash = %+v, %v", a, err)
	}
	if _, err := s.AccountByKeyHash(ctx, "nope"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("unknown key: got %v, want unauthenticated", err)
	}
	if _, err := s.GetAccount(ctx, "acc_x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown account: got %v, want not_found", err)
	}
}

func testTemplates(t *testing.T, s store.Store) {
	ctx := context.Background()
	tpl := sandbox.Template{ID: "tpl_1", Name: "base", Kernel: "/k", Initrd: "/i", BaseDisk: "/d", KernelArgs: "quiet", Hash: "h1", DiskMiB: 1024}
	if err := s.PutTemplate(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	tpl.Hash, tpl.BaseDisk = "h2", "/d2"
	if err := s.PutTemplate(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetTemplate(ctx, "base")
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash != "h2" || got.BaseDisk != "/d2" || got.Kernel != "/k" || got.KernelArgs != "quiet" {
		t.Fatalf("GetTemplate = %+v", got)
	}
	if _, err := s.GetTemplate(ctx, "other"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown template: got %v", err)
	}
	// Account templates are filed by id: two accounts may use one name.
	a := sandbox.Template{ID: "tpl_a", Name: "py", AccountID: "acc_a", Dir: "/t/a", Env: []string{"X=1"}, State: sandbox.TemplateBuilding}
	b := sandbox.Template{ID: "tpl_b", Name: "py", AccountID: "acc_b", Dir: "/t/b"}
	for _, x := range []sandbox.Template{a, b} {
		if err := s.PutTemplate(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.GetTemplate(ctx, "tpl_a"); err != nil || got.Dir != "/t/a" || got.Env[0] != "X=1" || got.State != sandbox.TemplateBuilding {
		t.Fatalf("GetTemplate(tpl_a) = %+v, %v", got, err)
	}
	all, err := s.ListTemplates(ctx)
	if err != nil || len(all) != 3 {
		t.Fatalf("ListTemplates = %+v, %v", all, err)
	}
	if err := s.DeleteTemplate(ctx, "tpl_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTemplate(ctx, "tpl_a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleted template: got %v", err)
	}
}

func testSandboxes(t *testing.T, s store.Store) {
	ctx := context.Background()
	mk := func(id, name, acc string, at time.Time) *store.SandboxRecord {
		return &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: name, AccountID: acc, State: sandbox.StateStarting,
			Env: map[string]string{"A": "1"}, CreatedAt: at}, MAC: "52:54:00:00:00:01"}
	}
	t0 := time.Now().UTC()
	for i, r := range []*store.SandboxRecord{
		mk("sbx_a", "alpha", "acc_1", t0),
		mk("sbx_b", "beta", "acc_1", t0.Add(time.Second)),
		mk("sbx_c", "alpha", "acc_2", t0.Add(2*time.Second)), // same name, other account
	} {
		if err := s.CreateSandboxes(ctx, r); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if err := s.CreateSandboxes(ctx, mk("sbx_d", "alpha", "acc_1", t0)); !errors.Is(err, errdefs.ErrNameTaken) {
		t.Fatalf("duplicate live name: got %v, want name_taken", err)
	}
	// Several at once are all or none: a taken name refuses the whole batch.
	batches := []struct {
		name string
		rs   []*store.SandboxRecord
	}{
		{"a live name", []*store.SandboxRecord{mk("sbx_f1", "fresh-1", "acc_1", t0), mk("sbx_f2", "beta", "acc_1", t0)}},
		{"the same name twice", []*store.SandboxRecord{mk("sbx_f3", "twin", "acc_1", t0), mk("sbx_f4", "twin", "acc_1", t0)}},
	}
	for _, b := range batches {
		if err := s.CreateSandboxes(ctx, b.rs...); !errors.Is(err, errdefs.ErrNameTaken) {
			t.Fatalf("batch with %s: got %v, want name_taken", b.name, err)
		}
		for _, r := range b.rs {
			if _, err := s.GetSandbox(ctx, r.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("batch with %s left %s behind: %v", b.name, r.ID, err)
			}
		}
	}
	got, err := s.GetSandbox(ctx, "sbx_a")
	if err != nil || got.Name != "alpha" || got.Env["A"] != "1" || got.MAC == "" {
		t.Fatalf("GetSandbox = %+v, %v", got, err)
	}
	if _, err := s.GetSandbox(ctx, "sbx_zz"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown sandbox: got %v", err)
	}

	// An aborted update changes nothing.
	boom := errors.New("boom")
	if _, err := s.UpdateSandbox(ctx, "sbx_a", func(r *store.SandboxRecord) error { r.State = sandbox.StateError; return boom }); !errors.Is(err, boom) {
		t.Fatalf("aborted update: %v", err)
	}
	if got, _ := s.GetSandbox(ctx, "sbx_a"); got.State != sandbox.StateStarting {
		t.Fatalf("aborted update leaked state %s", got.State)
	}

	// Destroying frees the name.
	if _, err := s.UpdateSandbox(ctx, "sbx_a", func(r *store.SandboxRecord) error {
		r.State = sandbox.StateDestroyed
		r.Handle = nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandboxes(ctx, mk("sbx_e", "alpha", "acc_1", t0.Add(3*time.Second))); err != nil {
		t.Fatalf("name of a destroyed sandbox should be free: %v", err)
	}
	// By name: the live holder of the name, within its account only.
	byName := []struct {
		acc, name, want string
	}{
		{"acc_1", "alpha", "sbx_e"}, // not the destroyed sbx_a
		{"acc_2", "alpha", "sbx_c"},
		{"acc_1", "beta", "sbx_b"},
		{"acc_2", "beta", ""},
		{"acc_1", "nobody", ""},
	}
	for _, c := range byName {
		got, err := s.SandboxByName(ctx, c.acc, c.name)
		switch {
		case c.want == "" && !errors.Is(err, errdefs.ErrNotFound):
			t.Fatalf("SandboxByName(%s, %s) = %v, %v; want not_found", c.acc, c.name, got, err)
		case c.want != "" && (err != nil || got.ID != c.want):
			t.Fatalf("SandboxByName(%s, %s) = %v, %v; want %s", c.acc, c.name, got, err, c.want)
		}
	}

	cases := []struct {
		name   string
		filter store.SandboxFilter
		want   []string
	}{
		{"account live", store.SandboxFilter{AccountID: "acc_1"}, []string{"sbx_b", "sbx_e"}},
		{"account all", store.SandboxFilter{AccountID: "acc_1", IncludeDestroyed: true}, []string{"sbx_a", "sbx_b", "sbx_e"}},
		{"every account", store.SandboxFilter{}, []string{"sbx_b", "sbx_c", "sbx_e"}},
		{"by state", store.SandboxFilter{States: []sandbox.State{sandbox.StateDestroyed}}, []string{"sbx_a"}},
		{"first page", store.SandboxFilter{Limit: 2}, []string{"sbx_b", "sbx_c"}},
		{"next page", store.SandboxFilter{After: "sbx_c", Limit: 2}, []string{"sbx_e"}},
		{"after the last", store.SandboxFilter{After: "sbx_e"}, nil},
		{"after, within an account", store.SandboxFilter{AccountID: "acc_1", After: "sbx_b"}, []string{"sbx_e"}},
		{"after an unknown id", store.SandboxFilter{After: "sbx_zzz"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			list, err := s.ListSandboxes(ctx, c.filter)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range list {
				ids = append(ids, r.ID)
			}
			if len(ids) != len(c.want) {
				t.Fatalf("got %v, want %v", ids, c.want)
			}
			for i := range ids {
				if ids[i] != c.want[i] {
					t.Fatalf("got %v, want %v", ids, c.want)
				}
			}
		})
	}
}

func testSnapshots(t *testing.T, s store.Store) {
	ctx := context.Background()
	mk := func(id, name string) *store.SnapshotRecord {
		return &store.SnapshotRecord{Snapshot: sandbox.Snapshot{ID: id, SandboxID: "sbx_a", Name: name, CreatedAt: time.Now().UTC(), IncludeRAM: true}, Image: "img_" + id}
	}
	if err := s.CreateSnapshot(ctx, mk("snp_1", "one"), 2); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSnapshot(ctx, mk("snp_2", "one"), 2); !errors.Is(err, errdefs.ErrNameTaken) {
		t.Fatalf("duplicate name: %v, want name_taken", err)
	}
	if err := s.CreateSnapshot(ctx, mk("snp_3", "two"), 2); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSnapshot(ctx, mk("snp_4", "three"), 2); !errors.Is(err, errdefs.ErrLimitReached) {
		t.Fatalf("over the limit: %v, want limit_reached", err)
	}
	other := mk("snp_5", "one")
	other.SandboxID = "sbx_b"
	if err := s.CreateSnapshot(ctx, other, 2); err != nil {
		t.Fatalf("same name on another sandbox: %v", err)
	}
	got, err := s.GetSnapshot(ctx, "snp_1")
	if err != nil || got.Name != "one" || got.Image != "img_snp_1" {
		t.Fatalf("get: %+v %v", got, err)
	}
	if got, err := s.SnapshotByName(ctx, "sbx_b", "one"); err != nil || got.ID != "snp_5" {
		t.Fatalf("by name on sbx_b: %+v %v, want snp_5", got, err)
	}
	if _, err := s.SnapshotByName(ctx, "sbx_b", "two"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("by name, another sandbox's: %v, want not_found", err)
	}
	list, err := s.ListSnapshots(ctx, "sbx_a")
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %d %v", len(list), err)
	}
	if all, _ := s.ListSnapshots(ctx, ""); len(all) != 3 {
		t.Fatalf("list all: %d", len(all))
	}
	if err := s.DeleteSnapshot(ctx, "snp_1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSnapshot(ctx, "snp_1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if _, err := s.GetSnapshot(ctx, "snp_1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
}
