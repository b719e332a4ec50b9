package node

import (
	"errors"
	"sync"
	"testing"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm/vmmfake"
)

// crashOnDial makes the guest of every sandbox match accepts die when the
// node dials its agent (a kernel panic while booting, say).
func (h *harness) crashOnDial(match func(id string) bool) {
	h.drv.SetHook(func(op vmmfake.Op, id string) error {
		if op != vmmfake.OpDialAgent || !match(id) {
			return nil
		}
		for _, v := range h.drv.VMs() {
			if v.Handle.Spec.ID == id {
				h.drv.Kill(&v.Handle)
			}
		}
		return errors.New("the guest died")
	})
}

func anyID(string) bool { return true }

// crashRecordedOnDial is crashOnDial, once, for the VM a sandbox's record
// names when its agent is dialled (a restore's new VM, not the one it
// replaces).
func (h *harness) crashRecordedOnDial() {
	var once sync.Once
	h.drv.SetHook(func(op vmmfake.Op, id string) error {
		crash := false
		if op == vmmfake.OpDialAgent {
			once.Do(func() { crash = true })
		}
		if !crash {
			return nil
		}
		r, err := h.st.GetSandbox(h.ctx, id)
		if err != nil {
			return nil
		}
		hd, _ := r.VMHandle()
		for _, v := range h.drv.VMs() {
			if hd != nil && v.Handle.PID == hd.PID {
				h.drv.Kill(&v.Handle)
			}
		}
		return errors.New("the guest died")
	})
}

// children lists the sandboxes forked from id.
func (h *harness) children(id string) []*store.SandboxRecord {
	h.t.Helper()
	rows, err := h.st.ListSandboxes(h.ctx, store.SandboxFilter{})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []*store.SandboxRecord
	for _, r := range rows {
		if r.ParentID == id {
			out = append(out, r)
		}
	}
	return out
}

// TestRollback injects a failure at each step of create, fork, snapshot,
// stop, start, restore and delete. Each ends in the state the failure
// calls for (the operation undone, or error with a stable code), records
// agree with the VMs, and deleting everything leaves nothing behind.
func TestRollback(t *testing.T) {
	running := func(h *harness) string { return h.create("box", sandbox.StateRunning).ID }
	child := func(paused bool) func(h *harness) string {
		return func(h *harness) string {
			kid := h.clone(running(h), 1, sandbox.StateRunning)[0]
			if paused {
				if _, err := h.n.Pause(h.ctx, kid.ID); err != nil {
					h.t.Fatal(err)
				}
			}
			return kid.ID
		}
	}
	create := func(h *harness, _ string) (string, error) {
		r, err := h.n.Create(h.ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{Name: "new", AccountID: "acc",
			Template: "base", MemoryMiB: 64, DiskMiB: 128, VCPUs: 1}})
		if err != nil {
			return "", err
		}
		return r.ID, nil
	}
	clone := func(h *harness, id string) (string, error) {
		_, kids, err := h.n.Clone(h.ctx, id, []*store.SandboxRecord{{Sandbox: sandbox.Sandbox{Name: "kid"}}})
		if len(kids) == 1 {
			h.settle(kids[0].ID, "")
			return kids[0].ID, err
		}
		return "", err
	}
	snapshot := func(h *harness, id string) (string, error) {
		_, err := h.n.CreateSnapshot(h.ctx, id, "snap")
		return "", err
	}
	stop := func(h *harness, id string) (string, error) { _, err := h.n.Stop(h.ctx, id); return "", err }
	stopped := func(h *harness) string {
		id := running(h)
		stop(h, id)
		h.settle(id, sandbox.StateStopped)
		return id
	}
	start := func(h *harness, id string) (string, error) { _, err := h.n.Start(h.ctx, id); return "", err }
	// restoreRunning snapshots a running sandbox and restores it.
	restore := func(h *harness, id string) (string, error) {
		h.drv.SetHook(nil)
		snap := h.snapshot(id, "snap")
		return "", h.inject(func() error { _, _, err := h.n.Restore(h.ctx, snap.ID); return err })
	}
	del := func(h *harness, id string) (string, error) { _, err := h.n.Delete(h.ctx, id); return "", err }
	fail := func(op vmmfake.Op, nth int) func(*harness) {
		return func(h *harness) { h.drv.FailNth(op, nth) }
	}

	cases := []struct {
		name   string
		setup  func(h *harness) string                // the sandbox operated on ("" for a create)
		inject func(h *harness)                       // arms the failure
		act    func(*harness, string) (string, error) // returns a new sandbox, if it made one
		err    bool                                   // the call itself fails
		state  sandbox.State                          // of the sandbox operated on, once settled
		made   sandbox.State                          // of the sandbox the call made
		code   string                                 // error code of the sandbox in error
	}{
		{name: "create/template", inject: func(h *harness) { h.tpl.fail = errors.New("no such image") }, act: create,
			made: sandbox.StateError, code: sandbox.ErrTemplateUnavailable},
		{name: "create/start", inject: fail(vmmfake.OpStart, 1), act: create, made: sandbox.StateError, code: sandbox.ErrBootFailed},
		{name: "create/guest dies", inject: func(h *harness) { h.crashOnDial(anyID) }, act: create,
			made: sandbox.StateError, code: sandbox.ErrBootFailed},

		{name: "fork/continuation start", setup: running, inject: fail(vmmfake.OpStart, 1), act: clone, err: true,
			state: sandbox.StateRunning},
		{name: "fork/capture", setup: running, inject: fail(vmmfake.OpCapture, 1), act: clone, err: true,
			state: sandbox.StateRunning},
		{name: "fork/load", setup: running, inject: fail(vmmfake.OpLoad, 1), act: clone, err: true,
			state: sandbox.StateStopped},
		{name: "fork/child start", setup: running, inject: fail(vmmfake.OpStart, 2), act: clone,
			state: sandbox.StateRunning, made: sandbox.StateError, code: sandbox.ErrBootFailed},
		{name: "fork/child dies", setup: running,
			inject: func(h *harness) { h.crashOnDial(func(id string) bool { return h.get(id).Name == "kid" }) },
			act:    clone, state: sandbox.StateRunning, made: sandbox.StateError, code: sandbox.ErrBootFailed},
		{name: "fork/live capture", setup: child(false), inject: fail(vmmfake.OpCaptureLive, 1), act: clone, err: true,
			state: sandbox.StateRunning},
		{name: "fork/promote", setup: child(true), inject: fail(vmmfake.OpPromote, 1), act: clone, err: true,
			state: sandbox.StatePaused},

		{name: "snapshot/capture", setup: running, inject: fail(vmmfake.OpCapture, 1), act: snapshot, err: true,
			state: sandbox.StateRunning},
		{name: "snapshot/load", setup: running, inject: fail(vmmfake.OpLoad, 1), act: snapshot, err: true,
			state: sandbox.StateStopped},
		{name: "snapshot/live capture", setup: child(false), inject: fail(vmmfake.OpCaptureLive, 1), act: snapshot, err: true,
			state: sandbox.StateRunning},

		{name: "stop/capture", setup: running, inject: fail(vmmfake.OpCapture, 1), act: stop, state: sandbox.StateRunning},
		{name: "start/start", setup: stopped, inject: fail(vmmfake.OpStart, 1), act: start, state: sandbox.StateStopped},
		{name: "start/guest dies", setup: stopped, inject: func(h *harness) { h.crashOnDial(anyID) }, act: start,
			state: sandbox.StateStopped},

		// A restore whose new VM does not come up leaves the sandbox
		// running its old VM: that goes only once the new one answers.
		{name: "restore/destroy", setup: running, inject: func(h *harness) { h.armed = fail(vmmfake.OpDestroy, 1) }, act: restore,
			state: sandbox.StateRunning},
		{name: "restore/start", setup: running, inject: func(h *harness) { h.armed = fail(vmmfake.OpStart, 1) }, act: restore,
			state: sandbox.StateRunning},
		{name: "restore/guest dies", setup: running, inject: func(h *harness) { h.armed = func(h *harness) { h.crashRecordedOnDial() } },
			act: restore, state: sandbox.StateRunning},

		{name: "create/store", inject: func(h *harness) { h.st.failNth("CreateSandboxes", 1) }, act: create, err: true},
		{name: "fork/store", setup: running, inject: func(h *harness) { h.st.failNth("CreateSandboxes", 1) }, act: clone,
			err: true, state: sandbox.StateRunning},
		{name: "fork/name taken", setup: func(h *harness) string { h.create("kid", sandbox.StateRunning); return running(h) },
			inject: func(*harness) {}, act: clone, err: true, state: sandbox.StateRunning},
		{name: "snapshot/store", setup: running, inject: func(h *harness) { h.st.failNth("CreateSnapshot", 1) }, act: snapshot,
			err: true, state: sandbox.StateRunning},
		{name: "delete/snapshots", setup: func(h *harness) string { id := running(h); h.snapshot(id, "s"); return id },
			inject: func(h *harness) { h.st.failNth("DeleteSnapshot", 1) }, act: del,
			state: sandbox.StateError, code: sandbox.ErrDeleteFailed},
		{name: "delete/destroy", setup: running, inject: fail(vmmfake.OpDestroy, 1), act: del,
			state: sandbox.StateError, code: sandbox.ErrDeleteFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			id := ""
			if c.setup != nil {
				id = c.setup(h)
			}
			c.inject(h)
			made, err := c.act(h, id)
			if (err != nil) != c.err {
				t.Fatalf("err = %v, want failure %v", err, c.err)
			}
			if c.err && !errors.Is(err, vmmfake.ErrInjected) && !errors.Is(err, errdefs.ErrNameTaken) {
				t.Errorf("the call's error does not carry its cause: %v", err)
			}
			if id != "" {
				r := h.settle(id, c.state)
				if c.state == sandbox.StateError && r.ErrorCode != c.code {
					t.Errorf("error code %q (%s), want %q", r.ErrorCode, r.ErrorMessage, c.code)
				}
			}
			if c.made != "" {
				if made == "" {
					t.Fatal("the call made no sandbox")
				}
				r := h.settle(made, c.made)
				if c.made == sandbox.StateError && r.ErrorCode != c.code {
					t.Errorf("new sandbox's error code %q (%s), want %q", r.ErrorCode, r.ErrorMessage, c.code)
				}
			} else if c.err && id != "" && len(h.children(id)) > 0 {
				t.Errorf("a failed fork recorded %d children", len(h.children(id)))
			}
			h.drv.SetHook(nil)
			if c.state == sandbox.StateRunning {
				h.requireAgent(id)
			}
			if c.state == sandbox.StateStopped {
				// What a failure left stopped starts again.
				if _, err := h.n.Start(h.ctx, id); err != nil {
					t.Fatal(err)
				}
				h.settle(id, sandbox.StateRunning)
				h.requireAgent(id)
			}
			h.requireConsistent()
			h.deleteAll()
		})
	}
}

// inject runs fn with the failure h.armed armed just before it (for
// operations whose setup must not fail).
func (h *harness) inject(fn func() error) error {
	if h.armed != nil {
		h.armed(h)
	}
	return fn()
}
