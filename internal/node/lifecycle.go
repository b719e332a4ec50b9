package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// do runs fn as the sandbox's next operation and waits for its result. fn
// runs under the node's lifetime: a client that goes away does not abort it.
func (n *Node) do(ctx context.Context, id string, fn func(ctx context.Context) error) error {
	errc := make(chan error, 1)
	n.run(id, func(octx context.Context) { errc <- fn(octx) })
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// load reads a sandbox and checks the lifecycle allows op in its state.
func (n *Node) load(ctx context.Context, id string, op sandbox.Op) (*store.SandboxRecord, *vmm.Handle, error) {
	r, err := n.opts.Store.GetSandbox(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if _, err := sandbox.NextFor(id, r.State, op); err != nil {
		return nil, nil, err
	}
	h, err := r.VMHandle()
	if err != nil {
		return nil, nil, err
	}
	if h == nil && r.State != sandbox.StateStopped {
		return nil, nil, fmt.Errorf("sandbox %s has no VM: %w", id, errdefs.ErrInternal)
	}
	return r, h, nil
}

// Pause freezes a running sandbox in memory.
func (n *Node) Pause(ctx context.Context, id string) (*store.SandboxRecord, error) {
	var out *store.SandboxRecord
	err := n.do(ctx, id, func(ctx context.Context) error {
		_, h, err := n.load(ctx, id, sandbox.OpPause)
		if err != nil {
			return err
		}
		if err := n.opts.Driver.Pause(ctx, h); err != nil {
			return err
		}
		out, err = n.transition(ctx, id, sandbox.OpPause, "", nil)
		return err
	})
	return out, err
}

// Resume lets a paused sandbox run again.
func (n *Node) Resume(ctx context.Context, id string) (*store.SandboxRecord, error) {
	var out *store.SandboxRecord
	err := n.do(ctx, id, func(ctx context.Context) error {
		_, h, err := n.load(ctx, id, sandbox.OpResume)
		if err != nil {
			return err
		}
		if err := n.opts.Driver.Resume(ctx, h); err != nil {
			return err
		}
		out, err = n.transition(ctx, id, sandbox.OpResume, "",
			func(r *store.SandboxRecord) { r.Pristine = false })
		return err
	})
	return out, err
}

// Stop suspends a sandbox to disk: memory, device state and disk are kept,
// the VMM exits and no compute is used until Start.
func (n *Node) Stop(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return n.StopReason(ctx, id, "")
}

// StopReason is Stop that leaves reason as the sandbox's state_reason (the
// control plane stops sandboxes whose budget ran out).
func (n *Node) StopReason(ctx context.Context, id, reason string) (*store.SandboxRecord, error) {
	// A stop writes the guest's whole RAM to the data dir: refuse it up
	// front, the sandbox untouched, rather than fill the disk halfway.
	if cur, err := n.opts.Store.GetSandbox(ctx, id); err == nil {
		if free, ok := datadir.FreeMiB(n.opts.DataDir); ok && free < cur.MemoryMiB+images.DiskHeadroomMiB {
			return nil, fmt.Errorf("host %s has %d MiB free in its data dir; stopping %s needs %d MiB for its memory: %w",
				n.opts.ID, free, id, cur.MemoryMiB+images.DiskHeadroomMiB, errdefs.ErrStorageFull)
		}
	}
	if caps := n.opts.Driver.Capabilities(); !caps.Suspend {
		return nil, fmt.Errorf("this host's VMM (%s) cannot suspend sandboxes: %w", caps.Name, errdefs.ErrInvalidState)
	}
	r, err := n.opts.Store.UpdateSandbox(ctx, id, func(r *store.SandboxRecord) error {
		next, err := sandbox.NextFor(id, r.State, sandbox.OpStop)
		if err != nil {
			return err
		}
		r.State, r.StateReason, r.UpdatedAt = next, reason, time.Now().UTC()
		return nil
	})
	if err != nil {
		return nil, err
	}
	n.watch.notify(id)
	n.run(id, func(ctx context.Context) {
		ctx = context.WithoutCancel(ctx) // half a suspend is worse than a slow one
		if err := n.suspend(ctx, id); err != nil {
			n.log.Error("stop failed", logSandbox, id, "err", err)
			// The capture leaves the guest running when it fails.
			n.transition(ctx, id, sandbox.OpStopFailed, "stop failed: "+err.Error(), nil)
			return
		}
		n.transition(ctx, id, sandbox.OpStopped, reason, nil)
	})
	return r, nil
}

// suspend captures a sandbox's VM fully into a new image it resumes from.
func (n *Node) suspend(ctx context.Context, id string) error {
	r, err := n.opts.Store.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	h, err := r.VMHandle()
	if err != nil || h == nil {
		return fmt.Errorf("sandbox %s has no VM: %w", id, errdefs.ErrInternal)
	}
	n.agents.Drop(id)
	var (
		meta  = &images.Meta{SandboxID: id, Template: r.Template}
		dir   string
		lease *images.Lease
	)
	defer func() { lease.Release() }()
	err = rollback.Run(ctx,
		n.newImage(&meta.ID, &dir, &lease),
		rollback.Step{Name: "capture", Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
			if meta.VM, _, err = n.opts.Driver.Capture(ctx, h, dir, true); err != nil {
				return err
			}
			undo.Release() // the VM is gone: the image is the sandbox now
			return nil
		}},
		rollback.Step{Name: "record", Do: func(context.Context, *rollback.Stack) error {
			meta.CreatedAt = time.Now().UTC()
			// The disk is frozen into the image too, so the image is the
			// whole stopped sandbox: another node can start it from the
			// image store. The next start makes a fresh overlay on it.
			if n.images.HasRemote() && r.DiskBase == "" {
				if err := n.images.FreezeDisk(meta, r.Disk, r.Layers); err != nil {
					n.log.Warn("stop: disk not frozen into the image; the sandbox can start on this node only", logSandbox, id, "err", err)
					meta.Disk = ""
				}
			}
			return n.images.Write(meta)
		}},
		rollback.Step{Name: "resume image", Do: func(ctx context.Context, _ *rollback.Stack) error {
			r.ResumeImage = meta.ID
			if meta.Disk != "" {
				r.Layers = meta.Chain()
				r.Gen++
				r.Disk, r.DiskBase = n.diskPath(id, r.Gen), meta.Disk
			}
			return n.saveVM(ctx, r, nil)
		}},
	)
	if err != nil {
		return err
	}
	n.images.Publish(meta)
	os.RemoveAll(h.Spec.Dir)
	n.images.Collect(ctx)
	return nil
}

// Start resumes a stopped sandbox where it was (or from the snapshot a
// restore chose).
func (n *Node) Start(ctx context.Context, id string) (*store.SandboxRecord, error) {
	// A started sandbox counts against the host's memory again.
	cur, err := n.opts.Store.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	if !n.ours(cur) && sandbox.Allows(cur.State, sandbox.OpStart) {
		// Stopped on another node: only an image the store holds can move.
		if err := n.inStore(ctx, cur.ResumeImage, cur); err != nil {
			return nil, err
		}
	}
	if sandbox.Allows(cur.State, sandbox.OpStart) {
		release, err := n.budget.Reserve(cur.MemoryMiB, 1)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	from := "" // the node it moves from, if another's
	r, err := n.opts.Store.UpdateSandbox(ctx, id, func(r *store.SandboxRecord) error {
		next, err := sandbox.NextFor(id, r.State, sandbox.OpStart)
		if err != nil {
			return err
		}
		if !n.ours(r) {
			// This node's from now on: the control plane's watch of the
			// old node must not take the start for that node's.
			from, r.Host = r.Host, n.opts.ID
		}
		r.State, r.StateReason, r.UpdatedAt = next, "", time.Now().UTC()
		return nil
	})
	if err != nil {
		return nil, err
	}
	n.watch.notify(id)
	n.run(id, func(ctx context.Context) {
		if err := n.resumeStopped(ctx, id, from); err != nil {
			n.log.Error("start failed", logSandbox, id, "err", err)
			// Nothing of the stopped sandbox was changed: it can be started
			// again (on the node it was on, if it came from another).
			n.transition(ctx, id, sandbox.OpStartFailed, "start failed: "+err.Error(), func(r *store.SandboxRecord) {
				// Not taken over (its disk is not here yet): still the old node's.
				if from != "" && r.Host == n.opts.ID && !strings.HasPrefix(r.Disk, n.sandboxDir(id)+string(filepath.Separator)) {
					r.Host = from
				}
			})
			return
		}
		n.transition(ctx, id, sandbox.OpReady, "", nil)
	})
	return r, nil
}

// resumeStopped starts a VM from the sandbox's resume image on its disk;
// from is the node it stopped on when that was another.
func (n *Node) resumeStopped(ctx context.Context, id, from string) error {
	r, err := n.opts.Store.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	if from != "" {
		// Stopped on another node (lost, or full): from the image store,
		// after its template if this node has yet to fetch it (the
		// sandbox shows both fetches).
		if err := n.localKernel(ctx, r, id); err != nil {
			return fmt.Errorf("sandbox %s stopped on node %s: %w", id, from, err)
		}
		m, err := n.image(ctx, r.ResumeImage, id)
		if err != nil {
			return fmt.Errorf("sandbox %s stopped on node %s: %w", id, from, err)
		}
		if err := n.takeOver(ctx, r, m, true); err != nil {
			return err
		}
	}
	m, err := n.images.Read(r.ResumeImage)
	if err != nil || m.VM == nil {
		return fmt.Errorf("sandbox %s has no saved state to resume: %v: %w", id, err, errdefs.ErrInternal)
	}
	saved := *r
	var (
		spec vmm.Spec
		h    *vmm.Handle
	)
	err = rollback.Run(ctx,
		rollback.Step{Name: "folder", Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
			undo.Add(func(ctx context.Context) error { return n.saveVM(ctx, &saved, nil) })
			spec, err = n.nextVM(ctx, r)
			if err != nil {
				return err
			}
			undo.Add(removeDir(spec.Dir))
			return nil
		}},
		rollback.Step{Name: "vm", Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
			spec.From, spec.Disk = m.VM, r.Disk
			if r.DiskBase != "" {
				spec.BaseDisk = r.DiskBase
			}
			r.DiskBase, r.ResumeImage = "", ""
			h, err = n.startVM(ctx, undo, r, spec)
			return err
		}},
		rollback.Step{Name: "agent", Do: func(ctx context.Context, _ *rollback.Stack) error { return n.attach(ctx, id, h) }},
	)
	if err != nil {
		return err
	}
	n.images.Collect(ctx)
	return nil
}

// removeOldVM deletes the folder of a VM that a newer one replaced.
func (n *Node) removeOldVM(h *vmm.Handle) {
	if h != nil && filepath.Dir(h.Spec.Dir) != "" {
		os.RemoveAll(h.Spec.Dir)
	}
}
