package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// settleDriver is a vmm.Driver whose SettleCapture reports a chosen outcome;
// any other call panics (the embedded interface is nil).
type settleDriver struct {
	fakeDriver
	swapped bool
	calls   int
}

func (d *settleDriver) SettleCapture(_ context.Context, h *vmm.Handle, _ string, swap vmm.DiskSwap, _ bool) error {
	d.calls++
	if d.swapped {
		h.Disk = swap.Next
	}
	return nil
}

// TestSettleCapture checks what Recover makes of a live capture that zeishd
// did not see through: the disk swap recorded (once) when the VM writes the
// new overlay, everything of the capture removed when it does not, the
// journal gone either way.
func TestSettleCapture(t *testing.T) {
	cases := []struct {
		name     string
		swapped  bool
		recorded bool // the record already had the swap (zeishd died just before removing the journal)
	}{
		{"cut before the switch-over", false, false},
		{"cut after the switch-over", true, false},
		{"cut after recording", true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			st := openStore(t, dir)
			drv := &settleDriver{swapped: c.swapped}
			n := New(Options{ID: "node-1", DataDir: dir, Store: st, Driver: drv})
			defer n.Close()

			id := "sbx_a"
			sdir := n.sandboxDir(id)
			imgID, idir, lease, err := n.images.Create()
			if err != nil {
				t.Fatal(err)
			}
			lease.Release()
			old, next, frozen := filepath.Join(sdir, "disk-1.qcow2"), filepath.Join(sdir, "disk-2.qcow2"), n.images.LayerPath(imgID)
			os.MkdirAll(sdir, 0o700)
			for _, f := range []string{old, next} {
				os.WriteFile(f, []byte("q"), 0o600)
			}
			os.Link(old, frozen)
			h := &vmm.Handle{Spec: vmm.Spec{ID: id, Dir: filepath.Join(sdir, "vm-1")}, Disk: old}
			os.MkdirAll(h.Spec.Dir, 0o700)
			r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: "a", AccountID: "acc", State: sandbox.StateRunning,
				CreatedAt: time.Now()}, Layers: []string{"img_base"}, Disk: old, Gen: 2}
			if c.recorded {
				h.Disk, r.Disk, r.Layers = next, next, []string{"img_base", imgID}
			}
			if err := r.SetHandle(h); err != nil {
				t.Fatal(err)
			}
			if err := st.CreateSandboxes(ctx, r); err != nil {
				t.Fatal(err)
			}
			if err := n.writeJournal(id, liveJournal{Image: imgID, OldDisk: old, Run: true,
				Swap: vmm.DiskSwap{Frozen: frozen, Next: next}}); err != nil {
				t.Fatal(err)
			}

			got, _ := st.GetSandbox(ctx, id)
			gh, _ := got.VMHandle()
			n.settleCapture(ctx, got, gh)

			if drv.calls != 1 {
				t.Errorf("SettleCapture called %d times", drv.calls)
			}
			if _, err := os.Stat(n.journalPath(id)); !os.IsNotExist(err) {
				t.Errorf("journal left: %v", err)
			}
			got, _ = st.GetSandbox(ctx, id)
			gh, _ = got.VMHandle()
			if !c.swapped {
				if _, err := os.Stat(idir); !os.IsNotExist(err) {
					t.Errorf("image folder of a capture that never swapped is left: %v", err)
				}
				if got.Disk != old || !slices.Equal(got.Layers, []string{"img_base"}) {
					t.Errorf("record changed: disk %s layers %v", got.Disk, got.Layers)
				}
				return
			}
			if got.Disk != next || gh.Disk != next || !slices.Equal(got.Layers, []string{"img_base", imgID}) {
				t.Errorf("record: disk %s, handle disk %s, layers %v; want %s and [img_base %s]", got.Disk, gh.Disk, got.Layers, next, imgID)
			}
			m, err := n.images.Read(imgID)
			if err != nil || m.Disk != frozen || m.VM != nil || !slices.Equal(m.Layers, []string{"img_base"}) {
				t.Errorf("image: %+v %v; want a disk-only image over img_base", m, err)
			}
			if _, err := os.Stat(old); !os.IsNotExist(err) {
				t.Errorf("old overlay name left (the frozen layer holds its data): %v", err)
			}
			if _, err := os.Stat(frozen); err != nil {
				t.Errorf("frozen layer: %v", err)
			}
		})
	}
}
