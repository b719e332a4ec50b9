package control

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

func (f *fakeNode) StopReason(_ context.Context, id, reason string) (*store.SandboxRecord, error) {
	f.calls = append(f.calls, "stop "+id+" "+reason)
	return &store.SandboxRecord{}, nil
}

func (f *fakeNode) Delete(_ context.Context, id string) (*store.SandboxRecord, error) {
	f.calls = append(f.calls, "delete "+id)
	return &store.SandboxRecord{}, nil
}

// docs/quotas.md, Budgets: a sandbox whose cost reaches its
// max_cost_micros is stopped, reason budget_exhausted.
func TestEnforceBudgets(t *testing.T) {
	over := sbx("sbx_over", sandbox.StateRunning)
	over.MaxCostMicros, over.CostMicros = 100, 100
	pausedOver := sbx("sbx_pover", sandbox.StatePaused)
	pausedOver.MaxCostMicros, pausedOver.CostMicros = 100, 150
	under := sbx("sbx_under", sandbox.StateRunning)
	under.MaxCostMicros, under.CostMicros = 100, 99
	unlimited := sbx("sbx_free", sandbox.StateRunning)
	unlimited.CostMicros = 1 << 40
	stopped := sbx("sbx_stopped", sandbox.StateStopped)
	stopped.MaxCostMicros, stopped.CostMicros = 100, 500
	ctl, f := fixture(t, over, pausedOver, under, unlimited, stopped)
	ctl.EnforceBudgets(context.Background(), time.Now())
	slices.Sort(f.calls)
	want := []string{"stop sbx_over budget_exhausted", "stop sbx_pover budget_exhausted"}
	if !slices.Equal(f.calls, want) {
		t.Fatalf("node calls %v, want %v", f.calls, want)
	}
}

// docs/quotas.md, Timeouts: a sandbox past its deadline is deleted (the
// default), paused or stopped.
func TestEnforceTimeouts(t *testing.T) {
	now := time.Now()
	past, future := now.Add(-time.Second), now.Add(time.Hour)
	mk := func(id string, st sandbox.State, at time.Time, action string) *store.SandboxRecord {
		r := sbx(id, st)
		r.TimeoutAt, r.OnTimeout = &at, action
		return r
	}
	rows := []*store.SandboxRecord{
		mk("sbx_pause", sandbox.StateRunning, past, sandbox.OnTimeoutPause),
		mk("sbx_stop", sandbox.StatePaused, past, sandbox.OnTimeoutStop),
		mk("sbx_delete", sandbox.StateStopped, past, sandbox.OnTimeoutDelete),
		mk("sbx_later", sandbox.StateRunning, future, sandbox.OnTimeoutDelete),
		mk("sbx_pausestopped", sandbox.StateStopped, past, sandbox.OnTimeoutPause), // nothing to pause
		mk("sbx_starting", sandbox.StateStarting, past, sandbox.OnTimeoutDelete),   // left until it settles
	}
	ctl, f := fixture(t, rows...)
	ctl.EnforceTimeouts(context.Background(), now)
	slices.Sort(f.calls)
	want := []string{"delete sbx_delete", "pause", "stop sbx_stop timeout"}
	if !slices.Equal(f.calls, want) {
		t.Fatalf("node calls %v, want %v", f.calls, want)
	}
	// Pause and stop clear the deadline; a timeout that did nothing clears it too.
	for id, cleared := range map[string]bool{"sbx_pause": true, "sbx_stop": true, "sbx_pausestopped": true, "sbx_later": false} {
		r, err := ctl.store.GetSandbox(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if (r.TimeoutAt == nil) != cleared {
			t.Errorf("%s: deadline %v, cleared want %v", id, r.TimeoutAt, cleared)
		}
	}
}

// Budgets and timeouts are enforced by one replica at a time: the one that
// holds the enforce lease (issue 17: periodic work runs once cluster-wide).
func TestEnforceHoldsTheLease(t *testing.T) {
	over := sbx("sbx_over", sandbox.StateRunning)
	over.MaxCostMicros, over.CostMicros = 100, 100
	ctl, f := fixture(t, over)
	ctx := context.Background()
	now := time.Now()
	if ok, err := ctl.store.TryLease(ctx, EnforceLease, "other-replica", now, time.Minute); err != nil || !ok {
		t.Fatalf("other replica takes the lease: %v %v", ok, err)
	}
	if ctl.enforceOnce(ctx, now, time.Minute) || len(f.calls) != 0 {
		t.Fatalf("acted without the lease: calls %v", f.calls)
	}
	// The other replica died: its lease lapses and this one takes over.
	if !ctl.enforceOnce(ctx, now.Add(2*time.Minute), time.Minute) || !slices.Equal(f.calls, []string{"stop sbx_over budget_exhausted"}) {
		t.Fatalf("after the lease lapsed: calls %v", f.calls)
	}
	if ok, _ := ctl.store.TryLease(ctx, EnforceLease, "other-replica", now.Add(2*time.Minute), time.Minute); ok {
		t.Fatal("the other replica took a held lease back")
	}
}
