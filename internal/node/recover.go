package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

const handleFile = "handle.json"

// Recover reconciles the store with the VMs that really run, after zeishd
// (re)starts: running VMs are re-attached, half-done operations are finished
// or failed with a reason, and whatever belongs to no live sandbox (a VMM
// process, a sandbox folder) is removed.
func (n *Node) Recover(ctx context.Context) error {
	rows, err := n.opts.Store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return err
	}
	live := map[string]bool{}
	vmDirs := map[string]string{} // live sandbox → the folder of its one VM
	for _, r := range rows {
		if r.Host != n.opts.ID {
			continue
		}
		h, err := r.VMHandle()
		if err != nil {
			return err
		}
		n.settleCapture(ctx, r, h)
		alive := h != nil && n.opts.Driver.Alive(h)
		if alive {
			live[r.ID] = true
			vmDirs[r.ID] = h.Spec.Dir
			if o := h.Origin; o != nil {
				// A VM adopted from the ready pool: its command line still
				// names the placeholder it was launched for.
				vmDirs[o.ID] = o.Dir
			}
		}
		n.recoverOne(ctx, r, h, alive)
		if alive {
			n.merger.Queue(r.ID, len(r.Layers))
		}
	}
	n.links.Recover(n.opts.ID, rows)
	n.sweepDirs(ctx, live)
	n.sweepWarm(ctx)
	n.opts.Driver.Sweep(ctx, vmm.SweepScope{Root: filepath.Join(n.opts.DataDir, "sandboxes"), Live: vmDirs,
		Handle: func(ctx context.Context, id string) (*vmm.Handle, bool) {
			r, err := n.opts.Store.GetSandbox(ctx, id)
			if err != nil {
				if !errdefs.Is(err, errdefs.ClassNotFound) {
					n.log.Warn("sweep: read sandbox", logSandbox, id, "err", err)
				}
				return nil, false // not ours, or not known to be
			}
			h, _ := r.VMHandle()
			return h, true
		}})
	n.images.Recover()
	n.images.Collect(ctx)
	n.images.ResumeUploads() // what a restart cut short goes on
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.images.RunCold(n.life)
	}()
	if n.images.HasRemote() {
		n.wg.Add(2)
		go func() {
			defer n.wg.Done()
			n.collectEvery(n.life, remoteCollectEvery)
		}()
		go func() {
			defer n.wg.Done()
			n.images.RunClaims(n.life) // what the node holds stays in the store (claim.go)
		}()
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.ready.Run(n.life)
	}()
	return nil
}

func (n *Node) recoverOne(ctx context.Context, r *store.SandboxRecord, h *vmm.Handle, alive bool) {
	log := n.log.With(logSandbox, r.ID, "state", r.State, "alive", alive)
	found := sandbox.Found{HasVM: h != nil, Alive: alive, ResumeImage: r.ResumeImage != ""}
	act := sandbox.Recover(r.State, found)
	if act == sandbox.RecoverAdoptSuspend && !n.adoptSuspendImage(ctx, r) {
		found.NoSuspendImage = true
		act = sandbox.Recover(r.State, found)
	}
	switch act {
	case sandbox.RecoverFinishDelete:
		log.Info("recover: finishing delete")
		n.run(r.ID, func(ctx context.Context) { n.destroy(context.WithoutCancel(ctx), r.ID) })
	case sandbox.RecoverReattach:
		log.Info("recover: re-attaching")
		n.run(r.ID, func(ctx context.Context) {
			// A VM that is paused here was caught inside a pause or a
			// capture (a fork's, a snapshot's, a stop's, which resumes the
			// guest when it fails): let it run again, or its agent could
			// never answer. (A sandbox meant to be paused is RecoverKeepPaused.)
			if st, err := n.opts.Driver.State(ctx, h); err == nil && st == vmm.RunStatePaused {
				log.Info("recover: resuming a VM caught paused")
				if err := n.opts.Driver.Resume(ctx, h); err != nil {
					log.Warn("recover: resume", "err", err)
				}
			}
			connect := n.attach // an interrupted boot, start, restore or fork
			if r.State.Configured() {
				connect = n.reattach
			}
			if err := connect(ctx, r.ID, h); err != nil {
				if n.opts.Driver.Alive(h) {
					n.failSilent(ctx, r.ID, h, "agent did not answer after zeishd restart: "+err.Error())
				} else {
					n.failLost(ctx, r.ID, h, "the VM exited after zeishd restarted: "+err.Error())
				}
				return
			}
			n.transition(ctx, r.ID, sandbox.OpReattached, "", nil)
		})
	case sandbox.RecoverKeepPaused:
		log.Info("recover: paused VM found")
	case sandbox.RecoverAdoptSuspend:
		// The stop's capture completed, zeishd died before recording it.
		log.Info("recover: stop completed before the crash; back to stopped", "image", r.ResumeImage)
		if h != nil {
			n.opts.Driver.Destroy(ctx, h)
		}
		n.transition(ctx, r.ID, sandbox.OpSettled, "", nil)
	case sandbox.RecoverBackToStopped:
		// A stop that completed, or a start that never got its VM going.
		log.Info("recover: back to stopped")
		if h != nil {
			n.opts.Driver.Destroy(ctx, h)
		}
		n.saveVM(ctx, r, nil)
		n.transition(ctx, r.ID, sandbox.OpSettled, "", nil)
	case sandbox.RecoverVMLost:
		log.Warn("recover: VM is gone")
		n.failLost(ctx, r.ID, h, "the VM was not running when zeishd restarted")
	case sandbox.RecoverInterrupted:
		log.Warn("recover: boot never got a VM")
		n.fail(ctx, r.ID, sandbox.OpInterrupted, sandbox.ErrInterrupted, "zeishd stopped before the VM started",
			"zeishd stopped before the VM started; delete the sandbox and create it again", nil)
	}
}

// adoptSuspendImage finds the complete image a stop of r wrote (full:
// memory in its state file, disk not yet frozen into it) and makes it r's
// resume image, persisted. False when there is none.
func (n *Node) adoptSuspendImage(ctx context.Context, r *store.SandboxRecord) bool {
	entries, _ := os.ReadDir(n.images.Root())
	var best *images.Meta
	for _, e := range entries {
		m, err := n.images.Read(e.Name())
		// Only one made since the stop began: an older one (a stop since
		// started) would pair old memory with a newer disk.
		if err != nil || m.SandboxID != r.ID || m.VM == nil || m.VM.MemFile != "" || m.Disk != "" || m.CreatedAt.Before(r.UpdatedAt) {
			continue
		}
		if best == nil || m.CreatedAt.After(best.CreatedAt) {
			best = m
		}
	}
	if best == nil {
		return false
	}
	r.ResumeImage = best.ID
	return n.saveVM(ctx, r, nil) == nil
}

// failLost marks a sandbox whose VM is gone as error and removes what is
// left of the VM process (sockets, pid file, its RAM file). Its disk is the
// user's data: it stays, with the sandbox's folder, until the user deletes
// the sandbox.
func (n *Node) failLost(ctx context.Context, id string, h *vmm.Handle, reason string) {
	ctx = context.WithoutCancel(ctx)
	if err := n.opts.Driver.Destroy(ctx, h); err != nil {
		n.log.Error("clean up lost VM", logSandbox, id, "err", err)
	}
	n.fail(ctx, id, sandbox.OpVMLost, sandbox.ErrVMExited, reason, reason+"; its disk is kept until the sandbox is deleted", func(r *store.SandboxRecord) { r.Handle = nil })
}

// failSilent marks a sandbox whose VM runs but whose agent does not answer
// as error. A timeout proves nothing about the guest (it may be slow, or
// was paused): the VM is paused, not destroyed, and keeps its memory and
// disk until the user deletes the sandbox.
func (n *Node) failSilent(ctx context.Context, id string, h *vmm.Handle, reason string) {
	ctx = context.WithoutCancel(ctx)
	if err := n.opts.Driver.Pause(ctx, h); err != nil {
		n.log.Warn("pause silent VM", logSandbox, id, "err", err)
	}
	n.fail(ctx, id, sandbox.OpAgentSilent, sandbox.ErrAgentSilent, reason, reason+"; the VM is kept paused with its memory and disk until the sandbox is deleted", nil)
}

// sweepDirs removes sandbox folders that belong to no live sandbox, stopping
// a VM whose handle one still holds (zeishd died between launch and persisting).
func (n *Node) sweepDirs(ctx context.Context, live map[string]bool) {
	root := filepath.Join(n.opts.DataDir, "sandboxes")
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		id := e.Name()
		if live[id] {
			continue
		}
		r, err := n.opts.Store.GetSandbox(ctx, id)
		if err == nil && r.State.Live() {
			// Its own recovery handles it; a sandbox in error keeps its
			// files (the user's data) until it is deleted.
			continue
		}
		if err != nil && !errdefs.Is(err, errdefs.ClassNotFound) {
			continue // unknown is not the same as gone
		}
		handles, _ := filepath.Glob(filepath.Join(root, id, "vm-*", handleFile))
		for _, p := range handles {
			if b, err := os.ReadFile(p); err == nil {
				var h vmm.Handle
				if json.Unmarshal(b, &h) == nil {
					n.opts.Driver.Destroy(ctx, &h)
				}
			}
		}
		n.log.Warn("recover: removing orphaned sandbox folder", logSandbox, id)
		os.RemoveAll(filepath.Join(root, id))
	}
}

// writeHandleFile keeps a copy of the handle beside the VM's files, so a
// crash before the store has it still lets recovery stop the VM.
func writeHandleFile(dir string, h *vmm.Handle) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	// The VM folder belongs to the VM user: never write through a symlink
	// a VMM may have planted there.
	if err := datadir.WriteFile(filepath.Join(dir, handleFile), b); err != nil {
		return fmt.Errorf("write handle: %w", err)
	}
	return nil
}
