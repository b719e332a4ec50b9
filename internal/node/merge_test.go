package node

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm/vmmfake"
)

// waitLayers waits until sandbox id stands on n layers and returns them.
func (h *harness) waitLayers(id string, n int) []string {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l := h.get(id).Layers
		if len(l) == n {
			return l
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s stands on layers %v, want %d of them", id, l, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// requireOn checks sandbox id's overlay is backed by image layer's disk.
func (h *harness) requireOn(id, layer string) {
	h.t.Helper()
	r := h.get(id)
	if b, err := h.drv.DiskBacking(r.Disk); err != nil || b != h.n.images.LayerPath(layer) {
		h.t.Errorf("%s's overlay is backed by %q (%v), want the layer of %s", id, b, err, layer)
	}
}

// TestMergeLayers: with at most one frozen layer allowed, a child of a
// child stands on two, and so does its parent; both move onto one merge
// of them over the template's disk (one merge for the siblings); a crash
// between the record's two writes is finished at restart; a later capture
// stands on the merge; a delete of everything collects it.
func TestMergeLayers(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.DiskLayers = 1 })
	root := h.create("root", sandbox.StateRunning)
	kid := h.clone(root.ID, 1, sandbox.StateRunning)[0]
	if l := h.get(kid.ID).Layers; len(l) != 1 {
		t.Fatalf("a first fork's child stands on %v, want one layer", l)
	}
	grands := h.clone(kid.ID, 2, sandbox.StateRunning)
	merged := h.waitLayers(kid.ID, 1)[0]
	meta, err := h.n.images.Read(merged)
	if err != nil || meta.MergedFrom == "" || meta.VM != nil {
		t.Fatalf("the kid stands on %s: %+v, %v; want a merge holding only a disk", merged, meta, err)
	}
	if b, _ := h.drv.DiskBacking(meta.Disk); b != h.tpl.tpl.BaseDisk {
		t.Errorf("the merge is backed by %s, want the template's disk", b)
	}
	for _, id := range []string{kid.ID, grands[0].ID, grands[1].ID} {
		if l := h.waitLayers(id, 1); l[0] != merged {
			t.Errorf("%s stands on %v, want the shared merge %s", id, l, merged)
		}
		h.requireOn(id, merged)
	}
	if n := h.drv.Calls(vmmfake.OpMerge); n != 1 {
		t.Errorf("%d merges for three sandboxes on one layer, want 1", n)
	}
	if l := h.get(root.ID).Layers; len(l) != 1 || l[0] == merged {
		t.Errorf("the root stands on %v: it had one layer and nothing to merge", l)
	}
	h.requireConsistent()

	// zeishd dies between the record's two writes, with the overlay still
	// on the old chain: the restarted node finishes the move onto the same
	// merge, without merging again.
	old := []string{h.get(root.ID).Layers[0], meta.MergedFrom, merged}
	if _, err := h.st.UpdateSandbox(h.ctx, kid.ID, func(cur *store.SandboxRecord) error {
		cur.Layers = old
		return os.WriteFile(cur.Disk, []byte("overlay of "+h.n.images.LayerPath(meta.MergedFrom)+"\n"), 0o600)
	}); err != nil {
		t.Fatal(err)
	}
	h.restart()
	if l := h.waitLayers(kid.ID, 1); l[0] != merged {
		t.Errorf("after the restart the kid stands on %v, want %s", l, merged)
	}
	h.requireOn(kid.ID, merged)
	if n := h.drv.Calls(vmmfake.OpMerge); n != 1 {
		t.Errorf("%d merges after the restart, want the one before", n)
	}
	h.requireConsistent()

	// A capture after the merge stands on it.
	great := h.clone(grands[0].ID, 1, sandbox.StateRunning)[0]
	if l := h.waitLayers(great.ID, 1); l[0] == merged {
		t.Errorf("the next child stands on %v: the merge and its own layer were merged again", l)
	}
	h.restart()
	h.requireConsistent()
	h.deleteAll()
}

// TestMergeLayersRebaseFails: a rebase that fails leaves the sandbox on
// its old layers and its record saying so; the next capture merges again.
func TestMergeLayersRebaseFails(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.DiskLayers = 1 })
	root := h.create("root", sandbox.StateRunning)
	kid := h.clone(root.ID, 1, sandbox.StateRunning)[0]
	h.drv.FailNth(vmmfake.OpRebase, 1)
	grand := h.clone(kid.ID, 1, sandbox.StateRunning)[0]
	// One of the two rebases failed, the other went through.
	deadline := time.Now().Add(10 * time.Second)
	for h.drv.Calls(vmmfake.OpRebase) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the second rebase's record
	var failed string
	for _, id := range []string{kid.ID, grand.ID} {
		l := h.get(id).Layers
		switch len(l) {
		case 2:
			failed = id
			h.requireOn(id, l[1])
		case 1:
		default:
			t.Errorf("%s stands on %v", id, l)
		}
	}
	if failed == "" {
		t.Fatal("no sandbox kept its layers after the failed rebase")
	}
	h.requireConsistent()
	// Its next capture puts it on three layers: merged again.
	h.clone(failed, 1, sandbox.StateRunning)
	if l := h.waitLayers(failed, 1); slices.Contains(h.get(root.ID).Layers, l[0]) {
		t.Errorf("%s stands on %v", failed, l)
	}
	h.requireConsistent()
	h.deleteAll()
}
