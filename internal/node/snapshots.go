package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// CreateSnapshot saves the sandbox's disk and memory at one instant under
// name (already validated; empty: the default name, made unique among the
// sandbox's snapshots). A running sandbox pauses only for the capture.
func (n *Node) CreateSnapshot(ctx context.Context, id, name string) (*store.SnapshotRecord, error) {
	var snap *store.SnapshotRecord
	err := n.do(ctx, id, func(ctx context.Context) error {
		var cap *captured
		// Its refusals are the client's (limits, names, states): as they are.
		return rollback.Run(ctx,
			// The limit and the name, before pausing anything.
			rollback.Step{Name: "check", AsIs: true, Do: func(ctx context.Context, _ *rollback.Stack) (err error) {
				name, err = n.snapshotName(ctx, id, name)
				return err
			}},
			rollback.Step{Name: "capture", AsIs: true, Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
				if cap, err = n.capture(ctx, id, sandbox.OpSnapshot); err != nil {
					return err
				}
				// Without its record the image is nobody's: gc takes it.
				undo.Add(func(ctx context.Context) error { n.images.Collect(ctx); return nil })
				undo.Add(func(context.Context) error { cap.lease.Release(); return nil })
				return nil
			}},
			rollback.Step{Name: "record", AsIs: true, Do: func(ctx context.Context, _ *rollback.Stack) error {
				r, err := n.opts.Store.GetSandbox(ctx, id)
				if err != nil {
					return err
				}
				snap = &store.SnapshotRecord{
					Snapshot: sandbox.Snapshot{ID: sandbox.NewID(sandbox.PrefixSnapshot), SandboxID: id, AccountID: r.AccountID,
						Name: name, CreatedAt: time.Now().UTC(), IncludeRAM: true, SizeBytes: images.Size(cap.image)},
					Image: cap.image.ID,
				}
				if err := n.opts.Store.CreateSnapshot(ctx, snap, sandbox.MaxSnapshots); err != nil {
					return err
				}
				cap.lease.Release()
				return nil
			}},
		)
	})
	return snap, err
}

// snapshotName checks sandbox id may take another snapshot named name
// ("": the default name, made unique) and keep its RAM, and says the
// name.
func (n *Node) snapshotName(ctx context.Context, id, name string) (string, error) {
	existing, err := n.opts.Store.ListSnapshots(ctx, id)
	if err != nil {
		return "", err
	}
	names := make([]string, len(existing))
	for i, s := range existing {
		names[i] = s.Name
	}
	if name == "" {
		name = sandbox.DefaultSnapshotName(time.Now(), names)
	}
	if err := sandbox.CheckNewSnapshot(id, names, name); err != nil {
		return "", err
	}
	if cur, err := n.opts.Store.GetSandbox(ctx, id); err == nil {
		if err := n.checkAccountImageRAM(ctx, cur); err != nil {
			return "", err
		}
	}
	return name, nil
}

// DeleteSnapshot forgets a snapshot and frees what only it needed.
func (n *Node) DeleteSnapshot(ctx context.Context, id string) error {
	if err := n.opts.Store.DeleteSnapshot(ctx, id); err != nil {
		return err
	}
	n.images.Collect(ctx)
	return nil
}

// Restore rolls a sandbox back to one of its snapshots, in place. A running
// (or paused) sandbox goes through starting and comes back running from the
// snapshot; a stopped one stays stopped and its next start resumes from it.
func (n *Node) Restore(ctx context.Context, snapID string) (*store.SnapshotRecord, *store.SandboxRecord, error) {
	snap, err := n.opts.Store.GetSnapshot(ctx, snapID)
	if err != nil {
		return nil, nil, err
	}
	// Here, or in the image store (waiting for an upload in flight): it
	// is fetched once the sandbox shows it is restoring.
	if _, err := n.images.Chain(ctx, snap.Image); err != nil {
		return nil, nil, fmt.Errorf("snapshot %s: %w", snapID, err)
	}
	var inPlace bool // a stopped sandbox stays stopped: only its next start changes
	var moved bool   // from another node (lost): this node's from now on
	r, err := n.opts.Store.UpdateSandbox(ctx, snap.SandboxID, func(r *store.SandboxRecord) error {
		next, err := sandbox.NextFor(r.ID, r.State, sandbox.OpRestore)
		if err != nil {
			return err
		}
		if inPlace = next == r.State; !inPlace {
			r.State, r.StateReason, r.UpdatedAt = next, "restoring "+snap.Name, time.Now().UTC()
			if moved = !n.ours(r); moved {
				// Before it starts: the control plane's watch of the lost
				// node must not take the restore for that node's.
				r.Host = n.opts.ID
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	n.watch.notify(r.ID)
	if inPlace {
		err := n.do(ctx, r.ID, func(ctx context.Context) error {
			meta, err := n.image(ctx, snap.Image)
			if err != nil {
				return fmt.Errorf("snapshot %s: %w", snapID, err)
			}
			return n.restoreStopped(ctx, r.ID, meta)
		})
		if err != nil {
			return nil, nil, err
		}
		r, err = n.opts.Store.GetSandbox(ctx, r.ID)
		return snap, r, err
	}
	n.run(r.ID, func(ctx context.Context) {
		if err := n.restoreRunning(ctx, r.ID, snap.Image, moved); err != nil {
			n.log.Error("restore failed", logSandbox, r.ID, "err", err)
			if kept := (*errKeptOldVM)(nil); errors.As(err, &kept) {
				n.transition(ctx, r.ID, sandbox.OpReady, "restore to "+snap.Name+" failed, running as before: "+err.Error(), nil)
				return
			}
			n.fail(ctx, r.ID, sandbox.OpBootFailed, sandbox.ErrRestoreFailed, "restore failed: "+err.Error(), "restore failed: "+err.Error(), nil)
			return
		}
		n.transition(ctx, r.ID, sandbox.OpReady, "", nil)
	})
	return snap, r, nil
}

// restoreStopped points a stopped sandbox at the snapshot: its next start
// loads the snapshot's memory on a fresh overlay of the snapshot's disk.
func (n *Node) restoreStopped(ctx context.Context, id string, meta *images.Meta) error {
	r, _, err := n.load(ctx, id, sandbox.OpRewind)
	if err != nil {
		return err
	}
	if !n.ours(r) {
		return n.takeOver(ctx, r, meta, true)
	}
	old := r.Disk
	r.Gen++
	r.Disk = n.diskPath(id, r.Gen)
	r.DiskBase, r.ResumeImage = meta.Disk, meta.ID
	r.Layers = meta.Chain()
	if err := n.saveVM(ctx, r, nil); err != nil {
		return err
	}
	os.Remove(old) // later work is lost, by definition
	n.images.Collect(ctx)
	return nil
}

// restoreRunning replaces the sandbox's VM with one started from the
// snapshot's image (fetched first when it is not here: the sandbox shows
// the progress), and hands the guest its identity again (secrets
// included). The old VM goes only once the new one answers: if the new
// one does not come up, the sandbox keeps running on the old one
// (errKeptOldVM).
func (n *Node) restoreRunning(ctx context.Context, id, image string, moved bool) (err error) {
	r, err := n.opts.Store.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	h, err := r.VMHandle()
	if err != nil {
		return err
	}
	if moved {
		// Its template first, if this node has yet to fetch it: the
		// sandbox shows that fetch too.
		if err := n.localKernel(ctx, r, id); err != nil {
			return err
		}
	}
	meta, err := n.image(ctx, image, id)
	if err != nil {
		if h == nil || moved {
			return err
		}
		return &errKeptOldVM{err: err} // not touched
	}
	if moved {
		// Its node is lost, with the VM: the snapshot brings it back here.
		if err := n.takeOver(ctx, r, meta, false); err != nil {
			return err
		}
		h = nil
	}
	prev := *r // the VM fields to put back if the new VM fails
	prev.Layers = append([]string(nil), r.Layers...)
	old := r.Disk
	r.Layers = meta.Chain()
	r.DiskBase = ""
	if err := n.startRestored(ctx, r, meta, h); err != nil {
		if h == nil {
			return err
		}
		// The old VM was not touched: the sandbox goes on with it.
		prev.Gen = r.Gen
		if serr := n.saveVM(ctx, &prev, h); serr != nil {
			return errors.Join(err, serr)
		}
		if aerr := n.reattach(ctx, id, h); aerr != nil {
			return errors.Join(err, aerr)
		}
		return &errKeptOldVM{err: err}
	}
	n.removeOldVM(h)
	if old != "" && old != r.Disk {
		os.Remove(old)
	}
	n.images.Collect(ctx)
	return nil
}

// startRestored starts r's VM from the snapshot image and, once its agent
// answers, destroys the VM it replaces (old, nil for none); on any failure
// the new VM is undone and old, still running, is left as it is.
func (n *Node) startRestored(ctx context.Context, r *store.SandboxRecord, meta *images.Meta, old *vmm.Handle) error {
	var (
		spec vmm.Spec
		nh   *vmm.Handle
	)
	return rollback.Run(ctx,
		rollback.Step{Name: "folder", Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
			if spec, err = n.nextVM(ctx, r); err != nil {
				return err
			}
			undo.Add(removeDir(spec.Dir))
			return nil
		}},
		rollback.Step{Name: "vm", Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
			spec.BaseDisk, spec.From = meta.Disk, meta.VM
			nh, err = n.startVM(ctx, undo, r, spec)
			return err
		}},
		rollback.Step{Name: "agent", Do: func(ctx context.Context, _ *rollback.Stack) error { return n.attach(ctx, r.ID, nh) }},
		rollback.Step{Name: "destroy the VM it replaces", Do: func(ctx context.Context, _ *rollback.Stack) error {
			if old == nil {
				return nil
			}
			return n.opts.Driver.Destroy(context.WithoutCancel(ctx), old)
		}},
	)
}

// errKeptOldVM: a restore whose new VM did not come up; the sandbox still
// runs its old VM, as it was.
type errKeptOldVM struct{ err error }

func (e *errKeptOldVM) Error() string { return e.err.Error() }
func (e *errKeptOldVM) Unwrap() error { return e.err }
