package control

import (
	"context"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// docs/sandboxes.md, Names: unique per account among sandboxes not yet destroyed. A name
// that is taken is refused before the node is asked (a fork would pause its
// parent for nothing) and before any quota is spent.
func TestNamesChecked(t *testing.T) {
	named := func(name string, st sandbox.State) *store.SandboxRecord {
		r := sbx("sbx_"+name, st)
		r.Name = name
		return r
	}
	gone := named("gone", sandbox.StateDestroyed)
	other := named("theirs", sandbox.StateRunning)
	other.AccountID = "acc_b"
	kids := func(names ...string) []*store.SandboxRecord {
		var out []*store.SandboxRecord
		for _, n := range names {
			out = append(out, &store.SandboxRecord{Sandbox: sandbox.Sandbox{Name: n, AccountID: "acc_a"}})
		}
		return out
	}
	cases := []struct {
		name     string
		create   string   // a create of this name, or
		children []string // a clone to these
		want     *errdefs.Error
	}{
		{"create: a live name", "used", nil, errdefs.ErrNameTaken},
		{"create: a destroyed sandbox's name is free", "gone", nil, nil},
		{"create: another account's name is free", "theirs", nil, nil},
		{"create: no name (generated)", "", nil, nil},
		{"clone: a live name", "", []string{"fresh", "used"}, errdefs.ErrNameTaken},
		{"clone: twice the same name", "", []string{"twin", "twin"}, errdefs.ErrNameTaken},
		{"clone: free names", "", []string{"a1", ""}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctl, f := fixture(t, named("used", sandbox.StateStopped), gone, other)
			ctx := context.Background()
			var err error
			if c.children == nil {
				r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{Name: c.create, AccountID: "acc_a", CreatedAt: time.Now()}}
				_, err = ctl.create(ctx, r)
			} else {
				_, _, err = ctl.clone(ctx, sbx("sbx_p", sandbox.StateRunning), kids(c.children...), "")
			}
			if c.want == nil && err != nil || c.want != nil && errdefs.Of(err) != c.want {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if c.want != nil && len(f.calls) != 0 {
				t.Fatalf("a refused name reached the node: %v", f.calls)
			}
		})
	}
}
