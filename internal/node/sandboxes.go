package node

import (
	"context"
	"fmt"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Delete moves a sandbox to deleting and, in the background, stops its VM,
// removes every file of it and marks it destroyed (the row stays for lineage
// and billing). An operation in progress (a boot) is cancelled first.
func (n *Node) Delete(ctx context.Context, id string) (*store.SandboxRecord, error) {
	r, err := n.opts.Store.UpdateSandbox(ctx, id, func(r *store.SandboxRecord) error {
		next, err := sandbox.NextFor(id, r.State, sandbox.OpDelete)
		if err != nil || next == r.State { // a delete under way goes on
			return err
		}
		r.State = next
		r.StateReason = ""
		r.UpdatedAt = time.Now().UTC()
		return nil
	})
	if err != nil {
		return nil, err
	}
	n.watch.notify(id)
	n.cancelOp(id)
	n.run(id, func(ctx context.Context) { n.destroy(context.WithoutCancel(ctx), id) })
	return r, nil
}

// destroy tears down the sandbox's VM and files and marks it destroyed.
func (n *Node) destroy(ctx context.Context, id string) {
	n.agents.Drop(id)
	r, err := n.opts.Store.GetSandbox(ctx, id)
	if err != nil {
		n.log.Error("destroy: read", logSandbox, id, "err", err)
		return
	}
	// Nothing of a delete can be undone: a step that fails leaves the
	// sandbox in error, for a delete to go on from there.
	err = rollback.Run(ctx,
		rollback.Step{Name: "vm", Do: func(ctx context.Context, _ *rollback.Stack) error {
			h, err := r.VMHandle()
			if err == nil && h != nil {
				err = n.opts.Driver.Destroy(ctx, h)
			}
			return err
		}},
		rollback.Step{Name: "network usage", Do: func(ctx context.Context, _ *rollback.Stack) error { return n.keepNetBytes(ctx, r) }},
		rollback.Step{Name: "network", Do: func(context.Context, *rollback.Stack) error { return n.links.Release(r) }},
		rollback.Step{Name: "files", Do: func(ctx context.Context, _ *rollback.Stack) error {
			if err := removeDir(n.sandboxDir(id))(ctx); err != nil {
				return err
			}
			if err := n.opts.Driver.Forget(id); err != nil {
				n.log.Warn("destroy: driver files", logSandbox, id, "err", err)
			}
			return nil
		}},
		rollback.Step{Name: "snapshots", Do: func(ctx context.Context, _ *rollback.Stack) error { return n.deleteSnapshotsOf(ctx, id) }},
	)
	if err != nil {
		n.log.Error("destroy", logSandbox, id, "err", err)
		n.fail(ctx, id, sandbox.OpDeleteFailed, sandbox.ErrDeleteFailed, "delete failed: "+err.Error(), "delete failed: "+err.Error(), nil)
		return
	}
	// Let go of the images first, so destroyed means its files are gone.
	r.Disk, r.DiskBase, r.Layers, r.ResumeImage = "", "", nil, ""
	if err := n.saveVM(ctx, r, nil); err != nil {
		n.log.Error("destroy: release images", logSandbox, id, "err", err)
	}
	n.images.Collect(ctx)
	now := time.Now().UTC()
	n.transition(ctx, id, sandbox.OpDestroyed, "", func(r *store.SandboxRecord) { r.DestroyedAt = &now })
}

// deleteSnapshotsOf deletes every snapshot of a sandbox being deleted.
func (n *Node) deleteSnapshotsOf(ctx context.Context, id string) error {
	snaps, err := n.opts.Store.ListSnapshots(ctx, id)
	if err != nil {
		return err
	}
	for _, s := range snaps {
		if err := n.opts.Store.DeleteSnapshot(ctx, s.ID); err != nil && !errdefs.Is(err, errdefs.ClassNotFound) {
			return err
		}
	}
	return nil
}

// Wait blocks until the sandbox settles (is in no transition) or reaches want
// if it is given, or until ctx ends.
func (n *Node) Wait(ctx context.Context, id string, want sandbox.State) (*store.SandboxRecord, error) {
	for {
		changed := n.watch.changed(id)
		r, err := n.opts.Store.GetSandbox(ctx, id)
		if err != nil {
			return nil, err
		}
		if sandbox.WaitOver(r.State, want) {
			return r, nil
		}
		if err := n.waitChange(ctx, id, changed); err != nil {
			return r, fmt.Errorf("sandbox %s is still %s: %w", id, r.State, errdefs.ErrTimeout)
		}
	}
}

// Agent returns a live connection to the sandbox's guest agent, reconnecting
// if the last one broke. The sandbox must be running.
//
// r is the sandbox as the caller just read it: every data-plane request
// comes here, so it is not read twice.
func (n *Node) Agent(ctx context.Context, r *store.SandboxRecord) (*guest.Client, error) {
	id := r.ID
	if _, err := sandbox.NextFor(id, r.State, sandbox.OpAccess); err != nil {
		return nil, err
	}
	return n.agents.Keep(id, func() (*guest.Client, error) {
		h, err := r.VMHandle()
		if err != nil || h == nil {
			return nil, fmt.Errorf("sandbox %s has no VM: %w", id, errdefs.ErrUnavailable)
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		c, err := guest.Connect(cctx, n.agents.Dial(h))
		if err != nil {
			return nil, fmt.Errorf("reconnect to the agent of %s: %w", id, err)
		}
		return c, nil
	})
}
