package control

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/sandbox"
)

// fakeNode records which calls reached it; its function fields answer them.
// Calls it does not define are not expected here (the embedded nil Node
// panics).
type fakeNode struct {
	Node
	calls  []string
	create func(*store.SandboxRecord) (*store.SandboxRecord, error)
	clone  func([]*store.SandboxRecord) (time.Duration, []*store.SandboxRecord, error)
	life   func(string) (*store.SandboxRecord, error)
}

func (f *fakeNode) Create(_ context.Context, r *store.SandboxRecord) (*store.SandboxRecord, error) {
	f.calls = append(f.calls, "create")
	return f.create(r)
}

func (f *fakeNode) Clone(_ context.Context, _ string, c []*store.SandboxRecord) (time.Duration, []*store.SandboxRecord, error) {
	f.calls = append(f.calls, "clone")
	return f.clone(c)
}

func (f *fakeNode) CloneSnapshot(_ context.Context, _ string, c []*store.SandboxRecord) ([]*store.SandboxRecord, error) {
	f.calls = append(f.calls, "clone-snapshot")
	_, made, err := f.clone(c)
	return made, err
}

func (f *fakeNode) lifecycle(op string) func(context.Context, string) (*store.SandboxRecord, error) {
	return func(_ context.Context, id string) (*store.SandboxRecord, error) {
		f.calls = append(f.calls, op)
		return f.life(id)
	}
}

func (f *fakeNode) Start(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return f.lifecycle("start")(ctx, id)
}
func (f *fakeNode) Stop(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return f.lifecycle("stop")(ctx, id)
}
func (f *fakeNode) Pause(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return f.lifecycle("pause")(ctx, id)
}
func (f *fakeNode) Resume(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return f.lifecycle("resume")(ctx, id)
}

// fixture: a store with account acc_a holding the given sandboxes, and a
// Control on a plan of 2 running slots, 3 creates a minute.
func fixture(t *testing.T, sandboxes ...*store.SandboxRecord) (*Control, *fakeNode) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "zeish.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if len(sandboxes) > 0 {
		if err := st.CreateSandboxes(ctx, sandboxes...); err != nil {
			t.Fatal(err)
		}
	}
	ok := &store.SandboxRecord{}
	f := &fakeNode{
		create: func(r *store.SandboxRecord) (*store.SandboxRecord, error) { return r, nil },
		clone: func(c []*store.SandboxRecord) (time.Duration, []*store.SandboxRecord, error) {
			return time.Millisecond, c, nil
		},
		life: func(string) (*store.SandboxRecord, error) { return ok, nil },
	}
	c := New(Options{Store: st, Node: f, Plan: Plan{RunningSlots: 2, CreatesPerMinute: 3, DailyCreates: 100}})
	c.cost = func(r *store.SandboxRecord, _ time.Time) int64 { return r.CostMicros }
	return c, f
}

func sbx(id string, st sandbox.State) *store.SandboxRecord {
	return &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: id, AccountID: "acc_a", State: st, CreatedAt: time.Now()}}
}

func TestLifecyclePolicy(t *testing.T) {
	spent := sbx("sbx_spent", sandbox.StateStopped)
	spent.MaxCostMicros, spent.CostMicros = 100, 100
	cases := []struct {
		name  string
		live  []*store.SandboxRecord // in the store
		op    sandbox.Op
		r     *store.SandboxRecord
		want  *errdefs.Error
		calls []string // what reached the node
	}{
		{"start with a free slot", nil, sandbox.OpStart, sbx("sbx_s", sandbox.StateStopped), nil, []string{"start"}},
		{"start without a slot", []*store.SandboxRecord{sbx("sbx_1", sandbox.StateRunning), sbx("sbx_2", sandbox.StatePaused)},
			sandbox.OpStart, sbx("sbx_s", sandbox.StateStopped), errdefs.ErrRunningSlots, nil},
		{"resume uses the slot the paused sandbox holds", []*store.SandboxRecord{sbx("sbx_1", sandbox.StateRunning), sbx("sbx_p", sandbox.StatePaused)},
			sandbox.OpResume, sbx("sbx_p", sandbox.StatePaused), nil, []string{"resume"}},
		{"docs/quotas.md, Budgets: a spent budget is not run again", nil, sandbox.OpStart, spent, errdefs.ErrBudgetExhausted, nil},
		{"stop needs no slot", []*store.SandboxRecord{sbx("sbx_1", sandbox.StateRunning), sbx("sbx_2", sandbox.StateRunning)},
			sandbox.OpStop, sbx("sbx_1", sandbox.StateRunning), nil, []string{"stop"}},
		{"pause of a spent sandbox is fine", nil, sandbox.OpPause, spent, nil, []string{"pause"}},
		{"not a lifecycle call", nil, sandbox.OpClone, sbx("sbx_1", sandbox.StateRunning), errdefs.ErrInternal, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctl, f := fixture(t, c.live...)
			_, err := ctl.lifecycle(context.Background(), c.op, c.r)
			if c.want == nil && err != nil || c.want != nil && errdefs.Of(err) != c.want {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if len(f.calls) != len(c.calls) || len(c.calls) > 0 && f.calls[0] != c.calls[0] {
				t.Fatalf("node calls %v, want %v", f.calls, c.calls)
			}
		})
	}
}

// docs/clone.md, rule 5: a fork of N is N creates and N slots, all or none;
// creates the node did not make give their rate tokens back.
func TestCloneAndCreatePolicy(t *testing.T) {
	ctx := context.Background()
	parent := sbx("sbx_p", sandbox.StateStopped)
	kids := func(n int) []*store.SandboxRecord {
		out := make([]*store.SandboxRecord, n)
		for i := range out {
			out[i] = &store.SandboxRecord{}
		}
		return out
	}
	ctl, f := fixture(t, parent)
	if _, _, err := ctl.clone(ctx, parent, kids(3), ""); !errors.Is(err, errdefs.ErrRunningSlots) || len(f.calls) != 0 {
		t.Fatalf("fork of 3 on 2 slots: %v, node calls %v", err, f.calls)
	}
	// A placement that is neither parent nor any is refused before anything.
	if _, _, err := ctl.clone(ctx, parent, kids(1), "elsewhere"); !errors.Is(err, errdefs.ErrInvalidArgument) || len(f.calls) != 0 {
		t.Fatalf("placement elsewhere: %v, node calls %v", err, f.calls)
	}
	// The node fails after the admission: the 2 creates come back.
	boom := errors.New("capture failed")
	f.clone = func([]*store.SandboxRecord) (time.Duration, []*store.SandboxRecord, error) { return 0, nil, boom }
	if _, _, err := ctl.clone(ctx, parent, kids(2), ""); !errors.Is(err, boom) {
		t.Fatalf("failed fork: %v", err)
	}
	// 3 creates a minute: a failed create gives its token back too.
	f.create = func(*store.SandboxRecord) (*store.SandboxRecord, error) { return nil, boom }
	if _, err := ctl.create(ctx, sbx("", "")); !errors.Is(err, boom) {
		t.Fatalf("failed create: %v", err)
	}
	f.create = func(r *store.SandboxRecord) (*store.SandboxRecord, error) { return r, nil }
	f.clone = func(c []*store.SandboxRecord) (time.Duration, []*store.SandboxRecord, error) { return 0, c, nil }
	if _, _, err := ctl.clone(ctx, parent, kids(2), ""); err != nil {
		t.Fatalf("fork of 2 after the refunds: %v", err)
	}
	if _, err := ctl.create(ctx, sbx("", "")); err != nil {
		t.Fatalf("the 3rd create of the minute: %v", err)
	}
	if _, err := ctl.create(ctx, sbx("", "")); !errors.Is(err, errdefs.ErrRateLimited) {
		t.Fatalf("a 4th create in the minute: %v", err)
	}
}
