package control

import (
	"context"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// namesFree refuses, before anything is admitted or paused, names that a
// live sandbox of the account holds or that the call gives twice (docs/sandboxes.md,
// Names: unique per account among sandboxes not yet destroyed). The
// store's unique index stays the last word for a name taken meanwhile: its
// insert of every new record is all or none.
func (c *Control) namesFree(ctx context.Context, account string, rs []*store.SandboxRecord) error {
	names := make([]string, 0, len(rs))
	for _, r := range rs {
		if r.Name != "" {
			names = append(names, r.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	taken := map[string]bool{}
	for _, n := range names {
		r, err := c.store.SandboxByName(ctx, account, n)
		if err == nil && r != nil {
			taken[n] = true
		} else if err != nil && !errdefs.Is(err, errdefs.ClassNotFound) {
			return err
		}
	}
	return sandbox.CheckNewNames(taken, names)
}
