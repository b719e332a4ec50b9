package node

import (
	"slices"
	"testing"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Children of a snapshot start from its image, whatever the sandbox's state
// since; the sandbox is not touched; the image outlives the snapshot while
// a child needs it.
func TestCloneSnapshot(t *testing.T) {
	for _, then := range []sandbox.State{sandbox.StateRunning, sandbox.StateStopped} {
		t.Run(string(then), func(t *testing.T) {
			h := newHarness(t)
			parent := h.create("p", sandbox.StateRunning)
			snap := h.snapshot(parent.ID, "s")
			if then == sandbox.StateStopped {
				if _, err := h.n.Stop(h.ctx, parent.ID); err != nil {
					t.Fatal(err)
				}
				h.settle(parent.ID, sandbox.StateStopped)
			}
			before := h.get(parent.ID)
			kids, err := h.n.CloneSnapshot(h.ctx, snap.ID, []*store.SandboxRecord{{}, {}})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range kids {
				k = h.settle(k.ID, sandbox.StateRunning)
				if k.ParentID != parent.ID || !slices.Contains(k.Layers, snap.Image) || k.MemoryMiB != parent.MemoryMiB {
					t.Errorf("child %+v", k.Sandbox)
				}
				h.requireAgent(k.ID)
			}
			if after := h.get(parent.ID); after.State != before.State || after.Gen != before.Gen {
				t.Errorf("the snapshot's sandbox changed: %s gen %d → %s gen %d", before.State, before.Gen, after.State, after.Gen)
			}
			if _, err := h.n.CloneSnapshot(h.ctx, "snp_00000000000000000000", []*store.SandboxRecord{{}}); err == nil {
				t.Error("clone of an unknown snapshot worked")
			}
			if err := h.n.DeleteSnapshot(h.ctx, snap.ID); err != nil {
				t.Fatal(err)
			}
			h.requireAgent(kids[0].ID)
			h.deleteAll()
		})
	}
}
