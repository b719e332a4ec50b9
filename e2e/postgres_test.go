package e2e

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// The e2e package's own PostgreSQL server, started on first use and stopped
// by TestMain.
var (
	pgOnce sync.Once
	pg     *testenv.Postgres
	pgErr  error
)

func postgresServer(t *testing.T) *testenv.Postgres {
	t.Helper()
	testenv.RequirePostgres(t)
	pgOnce.Do(func() { pg, pgErr = testenv.StartPostgres() })
	if pgErr != nil {
		t.Fatalf("start PostgreSQL: %v", pgErr)
	}
	return pg
}

// TestPostgresStore runs zeishd on PostgreSQL (ZEISH_DATABASE_URL) instead of
// its SQLite file: a sandbox is created, used, snapshotted, and found again
// running after zeishd restarts, all state in the database.
func TestPostgresStore(t *testing.T) {
	db := postgresServer(t).NewDatabase(t)
	s := startServer(t, "ZEISH_DATABASE_URL="+db)
	ctx := ctxFor(t, 10*time.Minute)
	if _, err := os.Stat(filepath.Join(s.dataDir, "zeish.db")); !os.IsNotExist(err) {
		t.Fatalf("zeishd on PostgreSQL made a SQLite file: %v", err)
	}
	sb, err := s.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: "on-pg", MemoryMiB: 256, Secrets: map[string]string{"TOKEN": "pg-secret"}}, zeish.Wait())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := s.client.Connect(ctx, "on-pg")
	if err != nil {
		t.Fatal(err)
	}
	if out := shell(t, conn, "echo $TOKEN > /root/f; cat /root/f"); out != "pg-secret" {
		t.Fatalf("exec: %q", out)
	}
	if _, err := s.client.CreateSnapshot(ctx, sb.ID, zeish.CreateSnapshotRequest{Name: "one"}); err != nil {
		t.Fatal(err)
	}
	s.stop()
	s.start()
	got, err := s.client.GetSandbox(ctx, "on-pg")
	if err != nil || got.ID != sb.ID || got.State != sandbox.StateRunning {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	conn, err = s.client.Connect(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out := shell(t, conn, "cat /root/f"); out != "pg-secret" {
		t.Fatalf("after restart: %q", out)
	}
	if snaps, err := s.client.ListSnapshots(ctx, sb.ID); err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots after restart: %+v %v", snaps, err)
	}
}
