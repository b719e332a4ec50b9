package control

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/postgres"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
)

// recordingNode "creates" a sandbox by recording it as running, after a
// delay that keeps the admission's hold in flight.
type recordingNode struct {
	Node
	store store.Store
}

func (n *recordingNode) Create(ctx context.Context, r *store.SandboxRecord) (*store.SandboxRecord, error) {
	time.Sleep(20 * time.Millisecond)
	r.State = sandbox.StateRunning
	return r, n.store.CreateSandboxes(ctx, r)
}

// Two control-plane replicas on one PostgreSQL database, 20 creates at once
// through both against 5 running slots: exactly 5 are made (issue 17:
// quotas enforced in the database, transactionally).
func TestReplicasShareQuotas(t *testing.T) {
	testenv.RequirePostgres(t)
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	url := pg.NewDatabase(t)
	ctx := context.Background()
	plan := Plan{RunningSlots: 5, CreatesPerMinute: 100, DailyCreates: 100}
	var replicas []*Control
	for range 2 {
		st, err := postgres.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		replicas = append(replicas, New(Options{Store: st, Node: &recordingNode{store: st}, Plan: plan}))
	}
	const tries = 20
	var wg sync.WaitGroup
	errs := make(chan error, tries)
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: fmt.Sprintf("sbx_r%02d", i), Name: fmt.Sprintf("r%d", i),
				AccountID: "acc_a", State: sandbox.StateStarting, CreatedAt: time.Now().UTC()}}
			_, err := replicas[i%2].create(ctx, r)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	made := 0
	for err := range errs {
		switch {
		case err == nil:
			made++
		case errors.Is(err, errdefs.ErrRunningSlots):
		default:
			t.Fatalf("create: %v", err)
		}
	}
	rows, err := replicas[0].store.ListSandboxes(ctx, store.SandboxFilter{AccountID: "acc_a"})
	if err != nil {
		t.Fatal(err)
	}
	if made != plan.RunningSlots || len(rows) != plan.RunningSlots {
		t.Fatalf("%d creates succeeded, %d sandboxes recorded; want exactly %d", made, len(rows), plan.RunningSlots)
	}
}
