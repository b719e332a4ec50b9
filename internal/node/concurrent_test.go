package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// TestConcurrentOperations runs pauses, resumes, stops, starts, snapshots
// and forks on one sandbox at once. Each either succeeds or is refused as
// the state at its turn allows (invalid_state), never anything else; once
// all settle, records and VMs agree and deleting everything leaves nothing.
func TestConcurrentOperations(t *testing.T) {
	h := newHarness(t)
	id := h.create("busy", sandbox.StateRunning).ID
	ops := []func(g, i int) error{
		func(int, int) error { _, err := h.n.Pause(h.ctx, id); return err },
		func(int, int) error { _, err := h.n.Resume(h.ctx, id); return err },
		func(g, i int) error {
			_, err := h.n.CreateSnapshot(h.ctx, id, fmt.Sprintf("s-%d-%d", g, i))
			return err
		},
		func(int, int) error {
			_, kids, err := h.n.Clone(h.ctx, id, []*store.SandboxRecord{{}})
			for _, k := range kids {
				h.settle(k.ID, sandbox.StateRunning)
			}
			return err
		},
		func(int, int) error {
			_, err := h.n.Stop(h.ctx, id)
			h.settle(id, "")
			return err
		},
		func(int, int) error {
			_, err := h.n.Start(h.ctx, id)
			h.settle(id, "")
			return err
		},
	}
	var wg sync.WaitGroup
	var done atomic.Int32
	errc := make(chan error, 64)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 6 {
				err := ops[(g+i*5)%len(ops)](g, i)
				if err == nil {
					done.Add(1)
				} else if !errors.Is(err, errdefs.ErrInvalidState) {
					errc <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	t.Logf("%d of 24 operations succeeded", done.Load())
	if done.Load() == 0 {
		t.Error("every operation was refused: nothing ran concurrently")
	}
	for err := range errc {
		t.Errorf("an operation failed for another reason than the state: %v", err)
	}
	h.settle(id, "")
	h.requireConsistent()
	h.deleteAll()
}

// A delete that arrives while a fork's children boot wins: the parent and
// every child end destroyed, nothing left.
func TestDeleteDuringFork(t *testing.T) {
	h := newHarness(t)
	id := h.create("parent", sandbox.StateRunning).ID
	_, kids, err := h.n.Clone(h.ctx, id, []*store.SandboxRecord{{}, {}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append(kids, &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id}}) {
		if _, err := h.n.Delete(h.ctx, k.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range kids {
		h.settle(k.ID, sandbox.StateDestroyed)
	}
	h.settle(id, sandbox.StateDestroyed)
	h.requireNothingLeft()
}

// TestRestartRecovery restarts the node (a new Node over the same store,
// data dir and driver, whose VMs ran on) with sandboxes in every state and
// a crash's leftovers. Running VMs are re-attached (one caught paused runs
// again), paused and stopped sandboxes stay so, a VM that died meanwhile
// leaves its sandbox error vm_exited, a boot that never got a VM is error
// interrupted, a delete in progress finishes, and a second VM of a live
// sandbox (launched ahead by a fork when zeishd died) is stopped and its
// RAM removed.
func TestRestartRecovery(t *testing.T) {
	h := newHarness(t)
	running := h.create("running", sandbox.StateRunning).ID
	caught := h.create("caught", sandbox.StateRunning).ID
	paused := h.create("paused", sandbox.StateRunning)
	if _, err := h.n.Pause(h.ctx, paused.ID); err != nil {
		t.Fatal(err)
	}
	stopped := h.create("stopped", sandbox.StateRunning).ID
	if _, err := h.n.Stop(h.ctx, stopped); err != nil {
		t.Fatal(err)
	}
	h.settle(stopped, sandbox.StateStopped)
	died := h.create("died", sandbox.StateRunning).ID
	deleting := h.create("deleting", sandbox.StateRunning).ID
	kid := h.clone(running, 1, sandbox.StateRunning)[0].ID

	h.n.Close() // zeishd goes away; its VMs run on
	// Meanwhile: a VM dies, one is caught paused (inside a capture), a
	// delete was recorded but not done, a boot was recorded with no VM,
	// and a fork's continuation was launched but never recorded.
	h.drv.Kill(h.vmOf(died))
	if err := h.drv.Pause(h.ctx, h.vmOf(caught)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.st.UpdateSandbox(h.ctx, deleting, func(r *store.SandboxRecord) error {
		r.State = sandbox.StateDeleting
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	unborn := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: sandbox.NewID(sandbox.PrefixSandbox), Name: "unborn",
		AccountID: "acc", State: sandbox.StateStarting, Host: "node-1", MemoryMiB: 64, CreatedAt: time.Now()}}
	if err := h.st.CreateSandboxes(h.ctx, unborn); err != nil {
		t.Fatal(err)
	}
	strayDir := filepath.Join(h.opts.DataDir, "sandboxes", running, "vm-99")
	if err := os.MkdirAll(strayDir, 0o700); err != nil {
		t.Fatal(err)
	}
	tpl := h.tpl.tpl
	stray, err := h.drv.Start(h.ctx, vmm.Spec{ID: running, Dir: strayDir, Kernel: tpl.Kernel,
		BaseDisk: tpl.BaseDisk, MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	configs := func(id string) int {
		for _, v := range h.drv.VMs() {
			if v.Handle.Spec.ID == id {
				return v.Configs
			}
		}
		return -1
	}
	before := configs(running)

	h.restart()

	for id, want := range map[string]sandbox.State{running: sandbox.StateRunning, caught: sandbox.StateRunning,
		kid: sandbox.StateRunning, paused.ID: sandbox.StatePaused, stopped: sandbox.StateStopped,
		died: sandbox.StateError, deleting: sandbox.StateDestroyed, unborn.ID: sandbox.StateError} {
		h.settle(id, want)
	}
	for _, id := range []string{running, caught, kid} {
		h.requireAgent(id)
	}
	// A running guest keeps its identity across a zeishd restart: it is
	// re-attached, not configured again (which would also replace a session
	// a data-plane request had already opened).
	if got := configs(running); got != before {
		t.Errorf("re-attached guest configured %d times, want %d (not again)", got, before)
	}
	if r := h.get(died); r.ErrorCode != sandbox.ErrVMExited {
		t.Errorf("died: code %q, want %q", r.ErrorCode, sandbox.ErrVMExited)
	}
	if r := h.get(unborn.ID); r.ErrorCode != sandbox.ErrInterrupted {
		t.Errorf("unborn: code %q, want %q", r.ErrorCode, sandbox.ErrInterrupted)
	}
	if h.drv.Alive(stray) {
		t.Error("the second VM of a live sandbox still runs")
	}
	if _, err := os.Stat(stray.MemFile); !os.IsNotExist(err) {
		t.Errorf("the second VM's RAM file is left: %v", err)
	}
	// The stopped one starts; everything is what its record says.
	if _, err := h.n.Start(h.ctx, stopped); err != nil {
		t.Fatal(err)
	}
	h.settle(stopped, sandbox.StateRunning)
	h.requireConsistent()
	h.deleteAll()
}
