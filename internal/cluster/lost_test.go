package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
)

func TestMarkLost(t *testing.T) {
	ctx := context.Background()
	st := testenv.SQLite(t)
	now := time.Now().UTC()
	beat := func(at time.Time) func(*store.NodeRecord) error {
		return func(n *store.NodeRecord) error { n.HeartbeatAt, n.Healthy = at, true; return nil }
	}
	st.UpdateNode(ctx, "silent", beat(now.Add(-time.Minute)))
	st.UpdateNode(ctx, "live", beat(now))
	sbx := func(id, host string, s sandbox.State) *store.SandboxRecord {
		return &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: id, AccountID: "acc_a", Host: host, State: s, CreatedAt: now, MemoryMiB: 256}}
	}
	rows := []*store.SandboxRecord{sbx("sbx_run", "silent", sandbox.StateRunning), sbx("sbx_paused", "silent", sandbox.StatePaused),
		sbx("sbx_stopped", "silent", sandbox.StateStopped), sbx("sbx_other", "live", sandbox.StateRunning)}
	if err := st.CreateSandboxes(ctx, rows...); err != nil {
		t.Fatal(err)
	}
	r := NewRouter(Options{Store: st, Nodes: st, LostAfter: 10 * time.Second})
	r.MarkLost(ctx, now)
	r.MarkLost(ctx, now) // again: nothing more changes
	cases := []struct {
		id       string
		state    sandbox.State
		code     string
		lostFrom sandbox.State
	}{
		{"sbx_run", sandbox.StateError, sandbox.ErrNodeLost, sandbox.StateRunning},
		{"sbx_paused", sandbox.StateError, sandbox.ErrNodeLost, sandbox.StatePaused},
		{"sbx_stopped", sandbox.StateStopped, "", ""},
		{"sbx_other", sandbox.StateRunning, "", ""},
	}
	for _, c := range cases {
		got, err := st.GetSandbox(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != c.state || got.ErrorCode != c.code || got.LostFrom != c.lostFrom {
			t.Errorf("%s: %s %q from %q, want %s %q from %q", c.id, got.State, got.ErrorCode, got.LostFrom, c.state, c.code, c.lostFrom)
		}
		// Billing stops with the loss: the running interval is closed.
		if open := len(got.Running) > 0 && got.Running[len(got.Running)-1].End == nil; open != (c.state == sandbox.StateRunning) {
			t.Errorf("%s: running interval open %v in state %s", c.id, open, got.State)
		}
	}
	// Placement skips the silent node.
	nodes, _ := r.Nodes(ctx)
	order, err := Place(nodes, Want{MemoryMiB: 256}, now, 10*time.Second)
	if err != nil || len(order) != 1 || order[0].ID != "live" {
		t.Fatalf("placement with a silent node: %+v %v", order, err)
	}
}
