package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"

	"github.com/zeish/zeish/internal/secrets"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/postgres"
	"github.com/zeish/zeish/internal/store/storetest"
	"github.com/zeish/zeish/internal/testenv"
)

// pg is this test binary's own PostgreSQL server, started on first use.
var (
	pgOnce sync.Once
	pg     *testenv.Postgres
	pgErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	pg.Stop()
	os.Exit(code)
}

func server(t testing.TB) *testenv.Postgres {
	t.Helper()
	testenv.RequirePostgres(t)
	pgOnce.Do(func() { pg, pgErr = testenv.StartPostgres() })
	if pgErr != nil {
		t.Fatalf("start PostgreSQL: %v", pgErr)
	}
	return pg
}

func open(t testing.TB, url string) *postgres.Store {
	t.Helper()
	box, err := secrets.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Open(context.Background(), url, postgres.WithSecrets(box))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The PostgreSQL store passes the same conformance suite as SQLite.
func TestConformance(t *testing.T) {
	srv := server(t)
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, srv.NewDatabase(t)) })
}

// Replicas starting together migrate once; a second Open finds the schema done.
func TestMigrateConcurrently(t *testing.T) {
	srv := server(t)
	url := srv.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(context.Background(), url)
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent open: %v", err)
		}
	}
}

// A bad URL is refused with a clear error.
func TestOpenBadURL(t *testing.T) {
	if _, err := postgres.Open(context.Background(), "postgres://%zz"); err == nil {
		t.Fatal("a malformed URL opened")
	}
}

// Two replicas taking snapshots of one sandbox at once never exceed its
// limit together, and never give one name twice.
func TestSnapshotLimitAcrossReplicas(t *testing.T) {
	srv := server(t)
	url := srv.NewDatabase(t)
	replicas := []*postgres.Store{open(t, url), open(t, url)}
	const limit, tries = 3, 12
	var wg sync.WaitGroup
	results := make(chan error, tries)
	for i := 0; i < tries; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &store.SnapshotRecord{Snapshot: sandbox.Snapshot{ID: fmt.Sprintf("snp_%020d", i), SandboxID: "sbx_a",
				Name: fmt.Sprintf("s%d", i%5), CreatedAt: time.Now().UTC(), IncludeRAM: true}}
			results <- replicas[i%2].CreateSnapshot(context.Background(), r, limit)
		}()
	}
	wg.Wait()
	close(results)
	ok := 0
	for err := range results {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, errdefs.ErrLimitReached), errors.Is(err, errdefs.ErrNameTaken):
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	list, _ := replicas[0].ListSnapshots(context.Background(), "sbx_a")
	if ok != limit || len(list) != limit {
		t.Fatalf("%d created, %d listed; want exactly %d", ok, len(list), limit)
	}
}

// Two replicas admitting for one account at once never together exceed
// its limit: the account's advisory lock serialises them.
func TestAdmissionsAcrossReplicas(t *testing.T) {
	srv := server(t)
	url := srv.NewDatabase(t)
	storetest.TestAdmissionsAcrossReplicas(t, open(t, url), open(t, url))
}
