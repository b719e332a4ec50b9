package node

import (
	"context"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// lose marks a sandbox as the control plane does when its node stops
// heartbeating: error node_lost, the state it was in kept.
func (h *harness) lose(id string) {
	h.t.Helper()
	_, err := h.st.UpdateSandbox(h.ctx, id, func(r *store.SandboxRecord) error {
		to, err := sandbox.Next(r.State, sandbox.OpNodeLost)
		r.LostFrom, r.State = r.State, to
		r.ErrorCode, r.StateReason = sandbox.ErrNodeLost, sandbox.ErrNodeLost
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

// A node that comes back (restarted, or its heartbeats through again)
// makes the sandboxes lost with it usable as they were where their VM
// outlived the absence; the others stay error, nothing is deleted.
func TestRejoin(t *testing.T) {
	h := newHarness(t)
	run := h.create("run", sandbox.StateRunning)
	paused := h.create("paused", sandbox.StateRunning)
	if _, err := h.n.Pause(h.ctx, paused.ID); err != nil {
		t.Fatal(err)
	}
	gone := h.create("gone", sandbox.StateRunning)
	for _, id := range []string{run.ID, paused.ID, gone.ID} {
		h.lose(id)
	}
	vm, _ := h.get(gone.ID).VMHandle()
	h.drv.Kill(vm) // its VM died while the node was away

	h.restart() // recovery leaves sandboxes in error alone
	if st := h.get(run.ID).State; st != sandbox.StateError {
		t.Fatalf("recovery changed a lost sandbox: %s", st)
	}
	h.n.Rejoin(h.ctx)
	want := map[string]sandbox.State{run.ID: sandbox.StateRunning, paused.ID: sandbox.StatePaused, gone.ID: sandbox.StateError}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		done := true
		for id, st := range want {
			if h.get(id).State != st {
				done = false
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after rejoin: run %s, paused %s, gone %s", h.get(run.ID).State, h.get(paused.ID).State, h.get(gone.ID).State)
		}
	}
	if r := h.get(run.ID); r.ErrorCode != "" || r.LostFrom != "" || r.StateReason != "" {
		t.Fatalf("rejoined sandbox keeps its loss: %+v", r.Sandbox)
	}
	h.requireAgent(run.ID)
	if r := h.get(gone.ID); r.ErrorCode != sandbox.ErrNodeLost {
		t.Fatalf("a sandbox whose VM died: %s %s", r.State, r.ErrorCode)
	}
	// Rejoin again changes nothing.
	h.n.Rejoin(context.Background())
	if st := h.get(paused.ID).State; st != sandbox.StatePaused {
		t.Fatalf("second rejoin: %s", st)
	}
}
