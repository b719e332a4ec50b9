package node

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// reach brings a new sandbox into state from (with one snapshot taken while
// it ran, for restores) and returns its id and the snapshot's.
func (h *harness) reach(from sandbox.State) (id, snapID string) {
	h.t.Helper()
	r := h.create("box", sandbox.StateRunning)
	snap := h.snapshot(r.ID, "before")
	switch from {
	case sandbox.StateRunning:
	case sandbox.StatePaused:
		if _, err := h.n.Pause(h.ctx, r.ID); err != nil {
			h.t.Fatal(err)
		}
	case sandbox.StateStopped:
		if _, err := h.n.Stop(h.ctx, r.ID); err != nil {
			h.t.Fatal(err)
		}
		h.settle(r.ID, sandbox.StateStopped)
	case sandbox.StateError:
		// The VM dies on its own; the watch notices.
		h.drv.Kill(h.vmOf(r.ID))
		h.n.checkVMs(h.ctx)
		if got, err := h.n.Wait(h.ctx, r.ID, sandbox.StateError); err != nil || got.State != sandbox.StateError {
			h.t.Fatalf("want error after the VM died: %v", err)
		}
	case sandbox.StateDestroyed:
		if _, err := h.n.Delete(h.ctx, r.ID); err != nil {
			h.t.Fatal(err)
		}
		h.settle(r.ID, sandbox.StateDestroyed)
	default:
		h.t.Fatalf("cannot reach %s", from)
	}
	return r.ID, snap.ID
}

// lifecycleOps are the node's operations on one sandbox, by name.
var lifecycleOps = map[string]func(h *harness, id, snapID string) error{
	"pause":  func(h *harness, id, _ string) error { _, err := h.n.Pause(h.ctx, id); return err },
	"resume": func(h *harness, id, _ string) error { _, err := h.n.Resume(h.ctx, id); return err },
	"stop":   func(h *harness, id, _ string) error { _, err := h.n.Stop(h.ctx, id); return err },
	"start":  func(h *harness, id, _ string) error { _, err := h.n.Start(h.ctx, id); return err },
	"snapshot": func(h *harness, id, _ string) error {
		_, err := h.n.CreateSnapshot(h.ctx, id, "after")
		return err
	},
	"restore": func(h *harness, _, snapID string) error { _, _, err := h.n.Restore(h.ctx, snapID); return err },
	"clone": func(h *harness, id, _ string) error {
		_, kids, err := h.n.Clone(h.ctx, id, []*store.SandboxRecord{{}})
		for _, k := range kids {
			h.settle(k.ID, sandbox.StateRunning)
			h.requireAgent(k.ID)
		}
		return err
	},
	"delete": func(h *harness, id, _ string) error { _, err := h.n.Delete(h.ctx, id); return err },
}

// TestTransitions runs every operation from every settled state: it either
// ends in the state the lifecycle says, or is refused with a typed error
// and changes nothing. Either way records and VMs agree, and deleting
// everything afterwards leaves no VM, RAM file, folder or image.
func TestTransitions(t *testing.T) {
	running, paused, stopped, destroyed := sandbox.StateRunning, sandbox.StatePaused, sandbox.StateStopped, sandbox.StateDestroyed
	invalid, notFound := errdefs.ErrInvalidState, errdefs.ErrNotFound
	type want struct {
		state sandbox.State
		err   error
	}
	table := map[sandbox.State]map[string]want{
		running: {
			"pause": {paused, nil}, "resume": {running, invalid}, "stop": {stopped, nil}, "start": {running, invalid},
			"snapshot": {running, nil}, "restore": {running, nil}, "clone": {running, nil}, "delete": {destroyed, nil},
		},
		paused: {
			"pause": {paused, invalid}, "resume": {running, nil}, "stop": {stopped, nil}, "start": {paused, invalid},
			"snapshot": {paused, nil}, "restore": {running, nil}, "clone": {paused, nil}, "delete": {destroyed, nil},
		},
		stopped: {
			"pause": {stopped, invalid}, "resume": {stopped, invalid}, "stop": {stopped, invalid}, "start": {running, nil},
			"snapshot": {stopped, nil}, "restore": {stopped, nil}, "clone": {stopped, nil}, "delete": {destroyed, nil},
		},
		sandbox.StateError: {
			"pause": {sandbox.StateError, invalid}, "resume": {sandbox.StateError, invalid}, "stop": {sandbox.StateError, invalid},
			"start": {sandbox.StateError, invalid}, "snapshot": {sandbox.StateError, invalid}, "restore": {running, nil},
			"clone": {sandbox.StateError, invalid}, "delete": {destroyed, nil},
		},
		destroyed: {
			"pause": {destroyed, invalid}, "resume": {destroyed, invalid}, "stop": {destroyed, invalid}, "start": {destroyed, invalid},
			"snapshot": {destroyed, invalid}, "restore": {destroyed, notFound}, "clone": {destroyed, invalid}, "delete": {destroyed, notFound},
		},
	}
	for from, ops := range table {
		for op, w := range ops {
			t.Run(fmt.Sprintf("%s/%s", from, op), func(t *testing.T) {
				t.Parallel()
				h := newHarness(t)
				id, snapID := h.reach(from)
				err := lifecycleOps[op](h, id, snapID)
				if !isErr(err, w.err) {
					t.Fatalf("%s of a %s sandbox: err %v, want %v", op, from, err, w.err)
				}
				r := h.settle(id, w.state)
				if w.state == running {
					h.requireAgent(id)
				}
				if err != nil && r.StateReason != "" && from != sandbox.StateError {
					t.Errorf("a refused %s left a reason: %q", op, r.StateReason)
				}
				h.requireConsistent()
				h.deleteAll()
			})
		}
	}
}

// Deleting a snapshot frees its image's memory once no VM maps it (the
// sandbox runs on from that image until it stops); the image's disk layer
// stays while the sandbox's disk is backed by it, and goes with the sandbox.
func TestDeleteSnapshotFreesMemory(t *testing.T) {
	h := newHarness(t)
	id := h.create("box", sandbox.StateRunning).ID
	snap := h.snapshot(id, "s")
	m, err := h.n.images.Read(snap.Image)
	if err != nil || m.VM == nil || m.VM.MemFile == "" {
		t.Fatalf("snapshot image: %+v %v", m, err)
	}
	mem := m.VM.MemFile
	if err := h.n.DeleteSnapshot(h.ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mem); err != nil {
		t.Errorf("the RAM the sandbox's VM maps went with the snapshot: %v", err)
	}
	if _, err := h.n.Stop(h.ctx, id); err != nil {
		t.Fatal(err)
	}
	h.settle(id, sandbox.StateStopped)
	if _, err := os.Stat(mem); !os.IsNotExist(err) {
		t.Errorf("the deleted snapshot's RAM is kept after its last VM stopped: %v", err)
	}
	if m, err := h.n.images.Read(snap.Image); err != nil || m.VM != nil || m.Disk == "" {
		t.Errorf("image after the delete: %+v %v; want its layer only", m, err)
	}
	if err := h.n.DeleteSnapshot(h.ctx, snap.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second delete: %v, want not_found", err)
	}
	h.requireConsistent()
	h.deleteAll()
}
