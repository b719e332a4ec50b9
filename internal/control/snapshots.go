package control

import (
	"context"
	"fmt"
	"slices"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Snapshots (docs/snapshots.md): a sandbox's disk and memory at one
// instant, named uniquely within the sandbox, at most 20 of them.

// SnapshotRef names a snapshot: by id alone (Sandbox ""), or under the
// caller's sandbox Sandbox by id or name.
type SnapshotRef struct {
	Sandbox  string
	Snapshot string
}

// ownSnapshot loads the caller's snapshot ref.
func (c *Control) ownSnapshot(ctx context.Context, who Caller, ref SnapshotRef) (*store.SnapshotRecord, error) {
	if ref.Sandbox != "" {
		r, err := c.own(ctx, who, ref.Sandbox)
		if err != nil {
			return nil, err
		}
		return c.snapshotOf(ctx, r, ref.Snapshot)
	}
	if err := sandbox.CheckID(sandbox.PrefixSnapshot, ref.Snapshot); err != nil {
		return nil, err
	}
	snap, err := c.store.GetSnapshot(ctx, ref.Snapshot)
	if err != nil {
		return nil, err
	}
	if snap.AccountID != who.Account.ID {
		return nil, fmt.Errorf("snapshot %s not found: %w", ref.Snapshot, errdefs.ErrNotFound)
	}
	return snap, nil
}

// snapshotOf is sandbox r's snapshot ref, an id or a name.
func (c *Control) snapshotOf(ctx context.Context, r *store.SandboxRecord, ref string) (*store.SnapshotRecord, error) {
	if sandbox.IsID(sandbox.PrefixSnapshot, ref) {
		snap, err := c.store.GetSnapshot(ctx, ref)
		if err != nil {
			return nil, err
		}
		if snap.SandboxID != r.ID {
			return nil, fmt.Errorf("sandbox %s has no snapshot %s: %w", r.ID, ref, errdefs.ErrNotFound)
		}
		return snap, nil
	}
	if err := sandbox.CheckSnapshotName(ref); err != nil {
		return nil, err
	}
	return c.store.SnapshotByName(ctx, r.ID, ref)
}

// CreateSnapshot saves the disk and memory of the caller's sandbox ref
// under req.Name (empty: the node picks the default name, knowing the
// sandbox's other snapshots); the node checks the name is unique and the
// limit (sandbox.CheckNewSnapshot) before it pauses anything.
func (c *Control) CreateSnapshot(ctx context.Context, who Caller, ref string, req api.CreateSnapshotRequest) (sandbox.Snapshot, error) {
	if req.IncludeRAM != nil && !*req.IncludeRAM {
		return sandbox.Snapshot{}, invalid("include_ram: snapshots always include memory; a sandbox is only restored from a saved memory image")
	}
	if req.Name != "" {
		if err := sandbox.CheckSnapshotName(req.Name); err != nil {
			return sandbox.Snapshot{}, err
		}
	}
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	snap, err := c.node.CreateSnapshot(ctx, r.ID, req.Name)
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	return c.snapshotView(ctx, snap), nil
}

// Snapshots lists the snapshots of the caller's sandbox ref.
func (c *Control) Snapshots(ctx context.Context, who Caller, ref string) (api.SnapshotList, error) {
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return api.SnapshotList{}, err
	}
	snaps, err := c.store.ListSnapshots(ctx, r.ID)
	if err != nil {
		return api.SnapshotList{}, err
	}
	out := api.SnapshotList{Snapshots: []sandbox.Snapshot{}}
	for _, x := range snaps {
		out.Snapshots = append(out.Snapshots, c.snapshotView(ctx, x))
	}
	return out, nil
}

// Snapshot is the caller's snapshot ref.
func (c *Control) Snapshot(ctx context.Context, who Caller, ref SnapshotRef) (sandbox.Snapshot, error) {
	snap, err := c.ownSnapshot(ctx, who, ref)
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	return c.snapshotView(ctx, snap), nil
}

// DeleteSnapshot removes the caller's snapshot ref (its image goes once
// nothing uses it).
func (c *Control) DeleteSnapshot(ctx context.Context, who Caller, ref SnapshotRef) error {
	snap, err := c.ownSnapshot(ctx, who, ref)
	if err != nil {
		return err
	}
	return c.node.DeleteSnapshot(ctx, snap.ID)
}

// Restore rolls the caller's snapshot ref's sandbox back to it, in place.
// A restore boots the sandbox again unless it is stopped, so a spent
// budget refuses it like a start (docs/quotas.md: max_cost_micros).
func (c *Control) Restore(ctx context.Context, who Caller, ref SnapshotRef) (sandbox.Snapshot, sandbox.Sandbox, error) {
	snap, err := c.ownSnapshot(ctx, who, ref)
	if err != nil {
		return sandbox.Snapshot{}, sandbox.Sandbox{}, err
	}
	r, err := c.store.GetSandbox(ctx, snap.SandboxID)
	if err != nil {
		return sandbox.Snapshot{}, sandbox.Sandbox{}, err
	}
	if next, err := sandbox.Next(r.State, sandbox.OpRestore); err == nil && next != r.State {
		if err := c.checkBudget(r); err != nil {
			return sandbox.Snapshot{}, sandbox.Sandbox{}, err
		}
		if !slices.Contains(sandbox.SlotStates, r.State) {
			// An error sandbox (its node lost, say) runs again: a slot.
			done, err := c.quotas.admit(ctx, r.AccountID, []string{r.ID}, false, r.ID)
			if err != nil {
				return sandbox.Snapshot{}, sandbox.Sandbox{}, err
			}
			defer done(1)
		}
	}
	snap, r, err = c.node.Restore(ctx, snap.ID)
	if err != nil {
		return sandbox.Snapshot{}, sandbox.Sandbox{}, err
	}
	return c.snapshotView(ctx, snap), c.view(r), nil
}
