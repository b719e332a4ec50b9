package control

import (
	"context"
	"fmt"
	"slices"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// The calls below carry no quota: they end, shrink or reshape what an
// account already has. They live here so that every call of the API goes
// through the control plane (one place for the policy of tomorrow) and the
// HTTP handlers stay decode, call, encode.

// Delete destroys r and its snapshots (in the background; the record says
// deleting until it is destroyed).
func (c *Control) Delete(ctx context.Context, r *store.SandboxRecord) (*store.SandboxRecord, error) {
	return c.node.Delete(ctx, r.ID)
}

// SetNetwork applies a live change to r's network policy, validated whole
// (sandbox.NetworkChange) before the node changes anything.
func (c *Control) SetNetwork(ctx context.Context, r *store.SandboxRecord, ch sandbox.NetworkChange) (*store.SandboxRecord, error) {
	next, err := ch.Apply(r.Network)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	return c.node.SetNetwork(ctx, r.ID, next)
}

// SetPortPublic opens a guest port of r to requests without a token, or
// closes it.
func (c *Control) SetPortPublic(ctx context.Context, r *store.SandboxRecord, port int, public bool) (*store.SandboxRecord, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: want 1..65535: %w", port, errdefs.ErrInvalidArgument)
	}
	return c.node.SetPortPublic(ctx, r.ID, port, public)
}

// DeleteSnapshot removes a snapshot (its image goes once nothing uses it).
func (c *Control) DeleteSnapshot(ctx context.Context, snap *store.SnapshotRecord) error {
	return c.node.DeleteSnapshot(ctx, snap.ID)
}

// Restore rolls r back to snap in place. A restore boots the sandbox again
// unless it is stopped, so a spent budget refuses it like a start (SPEC,
// Quotas: max_cost_micros).
func (c *Control) Restore(ctx context.Context, r *store.SandboxRecord, snap *store.SnapshotRecord) (*store.SnapshotRecord, *store.SandboxRecord, error) {
	if next, err := sandbox.Next(r.State, sandbox.OpRestore); err == nil && next != r.State {
		if err := c.CheckBudget(r); err != nil {
			return nil, nil, err
		}
		if !slices.Contains(sandbox.SlotStates, r.State) {
			// An error sandbox (its node lost, say) runs again: a slot.
			done, err := c.quotas.admit(ctx, r.AccountID, 1, false, r.ID)
			if err != nil {
				return nil, nil, err
			}
			defer done(1)
		}
	}
	return c.node.Restore(ctx, snap.ID)
}
