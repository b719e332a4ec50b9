package control

import (
	"context"
	"slices"
	"testing"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// wakeNode is fakeNode whose Wait finds the sandbox in state settled.
type wakeNode struct {
	*fakeNode
	settled sandbox.State
}

func (n *wakeNode) Wait(_ context.Context, id string, _ sandbox.State) (*store.SandboxRecord, error) {
	n.calls = append(n.calls, "wait")
	return sbx(id, n.settled), nil
}

// Wake runs a sandbox again whatever holds it, by the lifecycle table:
// what E2B's connect asks for.
func TestWake(t *testing.T) {
	id := sandbox.NewID(sandbox.PrefixSandbox)
	mk := func(st sandbox.State) *store.SandboxRecord {
		r := sbx(id, st)
		r.Name = "wake"
		return r
	}
	spent := mk(sandbox.StateStopped)
	spent.MaxCostMicros, spent.CostMicros = 100, 100
	cases := []struct {
		name    string
		r       *store.SandboxRecord
		settled sandbox.State // what a wait finds
		calls   []string
		woken   bool
		want    *errdefs.Error
	}{
		{"paused is resumed", mk(sandbox.StatePaused), sandbox.StateRunning, []string{"resume", "wait"}, true, nil},
		{"stopped is started", mk(sandbox.StateStopped), sandbox.StateRunning, []string{"start", "wait"}, true, nil},
		{"stopping is waited for, then started", mk(sandbox.StateStopping), sandbox.StateStopped, []string{"wait", "start", "wait"}, true, nil},
		{"starting is waited for", mk(sandbox.StateStarting), sandbox.StateRunning, []string{"wait"}, false, nil},
		{"running is left alone", mk(sandbox.StateRunning), sandbox.StateRunning, nil, false, nil},
		{"a spent budget is not run again", spent, sandbox.StateStopped, nil, false, errdefs.ErrBudgetExhausted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctl, f := fixture(t, c.r)
			n := &wakeNode{fakeNode: f, settled: c.settled}
			ctl.node = n
			_, woken, err := ctl.Wake(context.Background(), Caller{Account: api.Account{ID: "acc_a"}}, c.r.ID)
			if c.want == nil && err != nil || c.want != nil && errdefs.Of(err) != c.want {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if woken != c.woken || !slices.Equal(f.calls, c.calls) {
				t.Fatalf("woken %v, node calls %v; want %v, %v", woken, f.calls, c.woken, c.calls)
			}
		})
	}
}
