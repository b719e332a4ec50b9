package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// WatchNodes marks, every interval until ctx ends, the sandboxes of nodes
// silent for LostAfter as error node_lost (billing stops with running).
// Nothing on the node is touched: when it comes back it rejoins the ones
// whose VM still runs (node.Rejoin). Replicas may all run it: each mark is
// one transaction that the lifecycle table allows once.
func (r *Router) WatchNodes(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		r.MarkLost(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// MarkLost marks the sandboxes of every node silent at now.
func (r *Router) MarkLost(ctx context.Context, now time.Time) {
	nodes, err := r.o.Nodes.ListNodes(ctx)
	if err != nil {
		r.log.Warn("node watch: list nodes", "err", err)
		return
	}
	lost := map[string]store.NodeRecord{}
	for _, n := range nodes {
		if !Live(n, now, r.o.LostAfter) {
			lost[n.ID] = n
		}
	}
	if len(lost) == 0 {
		return
	}
	rows, err := r.o.Store.ListSandboxes(ctx, store.SandboxFilter{States: sandbox.Needs(sandbox.OpNodeLost)})
	if err != nil {
		r.log.Warn("node watch: list sandboxes", "err", err)
		return
	}
	for _, s := range rows {
		n, ok := lost[s.Host]
		if !ok {
			continue
		}
		msg := fmt.Sprintf("node %s has not heartbeated since %s; the sandbox is usable again if the node comes back with its VM",
			n.ID, n.HeartbeatAt.Format(time.RFC3339))
		// Read the node again: it may have come back since the list.
		if cur, err := r.o.Nodes.GetNode(ctx, n.ID); err == nil && Live(cur, time.Now(), r.o.LostAfter) {
			delete(lost, n.ID)
			continue
		}
		_, err := r.o.Store.UpdateSandbox(ctx, s.ID, func(rec *store.SandboxRecord) error {
			if rec.Host != n.ID {
				return fmt.Errorf("sandbox moved to %s", rec.Host)
			}
			to, err := sandbox.NextFor(rec.ID, rec.State, sandbox.OpNodeLost)
			if err != nil {
				return err
			}
			rec.LostFrom, rec.State = rec.State, to
			rec.StateReason, rec.ErrorCode, rec.ErrorMessage = sandbox.ErrNodeLost, sandbox.ErrNodeLost, msg
			rec.UpdatedAt = time.Now().UTC()
			return nil
		})
		if err != nil {
			r.log.Info("node watch: not marked", "sandbox", s.ID, "node", n.ID, "err", err)
			continue
		}
		r.log.Warn("sandbox lost with its node", "sandbox", s.ID, "node", n.ID, "was", s.State)
	}
}

// lost reports whether node id is lost: registered and silent for
// LostAfter, or not registered at all. A store that cannot say is not
// proof of loss.
func (r *Router) lost(ctx context.Context, id string) bool {
	n, err := r.o.Nodes.GetNode(ctx, id)
	if err != nil {
		return errdefs.Is(err, errdefs.ClassNotFound)
	}
	return !Live(n, time.Now(), r.o.LostAfter)
}

// forget deletes sandbox id, whose node host is lost, in the records only:
// its snapshots go, and it becomes destroyed with no saved state, so the
// image store's sweep may take its images. Its VM and files are on that
// node, which removes them when it restarts (Recover: the folder and VMM
// processes of a sandbox that is not live go; its gc, the images no record
// names). A node back from a partition without a restart keeps such a VM
// running until it restarts.
func (r *Router) forget(ctx context.Context, id, host string) (*store.SandboxRecord, error) {
	snaps, err := r.o.Store.ListSnapshots(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, s := range snaps {
		if err := r.o.Store.DeleteSnapshot(ctx, s.ID); err != nil && !errdefs.Is(err, errdefs.ClassNotFound) {
			return nil, err
		}
	}
	rec, err := r.o.Store.UpdateSandbox(ctx, id, func(rec *store.SandboxRecord) error {
		if rec.Host != host {
			return fmt.Errorf("sandbox %s moved to node %s meanwhile: %w", id, rec.Host, errdefs.ErrInvalidState)
		}
		deleting, err := sandbox.NextFor(id, rec.State, sandbox.OpDelete)
		if err != nil {
			return err
		}
		destroyed, err := sandbox.NextFor(id, deleting, sandbox.OpDestroyed)
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		rec.State, rec.StateReason, rec.UpdatedAt, rec.DestroyedAt = destroyed, "", now, &now
		// No VM handle: a restarted node finds no VM of the sandbox to
		// keep, and removes the folder and VMM processes it left.
		rec.ResumeImage, rec.Handle = "", nil
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.log.Warn("sandbox deleted while its node is lost: its VM and files go if the node comes back", "sandbox", id, "node", host)
	return rec, nil
}
