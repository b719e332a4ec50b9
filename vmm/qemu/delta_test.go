package qemu

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeish/zeish/vmm"
)

// TestCaptureByPrivatePages runs the real base template with a process
// writing all the time in a clone (its RAM an image's, mapped privately)
// and captures it live the way delta.go does: its private pages over a
// copy of its image, device state without RAM. At every step the source
// never stops counting and keeps its agent; each child starts where the
// source was at the pause, with the files and RAM written before and none
// after; a child of a delta image is captured the same way again. A clone
// holding more private RAM than the limit is migrated instead, and a
// delta capture that fails leaves nothing and the source running.
func TestCaptureByPrivatePages(t *testing.T) {
	d := newTestDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newCloneRig(ctx, t, d)
	src, sc := r.src, r.sc
	var deltas int64
	// captured checks which way a capture went, and that a delta capture
	// leaves neither its part-made RAM file nor its device state.
	captured := func(what string, h *vmm.Handle, delta bool) func(*vmm.Image) {
		return func(img *vmm.Image) {
			if delta {
				deltas++
			}
			if n := d.deltaCaptures.Load(); n != deltas {
				t.Fatalf("%s: %d captures by private pages, want %d", what, n, deltas)
			}
			for _, p := range []string{partMemFile(img.MemFile), filepath.Join(h.Spec.Dir, deltaStateName)} {
				if _, err := os.Stat(p); !os.IsNotExist(err) {
					t.Errorf("%s: %s is left (%v)", what, p, err)
				}
			}
		}
	}

	// A delta capture that fails (the frozen layer's folder is missing)
	// leaves no part-made image or state, and the source runs on, on its
	// disk.
	r.failCapture(func(bad string) string { return partMemFile(d.imageMemFile(bad)) },
		func(string) string { return filepath.Join(src.Spec.Dir, deltaStateName) })

	child, cc := r.captureLive("clone", src, sc, captured("clone", src, true))
	_, _ = r.captureLive("clone again", src, sc, captured("clone again", src, true))
	grandchild, gc := r.captureLive("child of the clone", child, cc, captured("child of the clone", child, true))
	// Over the limit (each capture writes 8 MB of RAM first): a migration,
	// from a VM started from a delta image.
	d.deltaMaxMiB = 4
	r.captureLive("child of a delta image, over the limit", grandchild, gc, captured("over the limit", grandchild, false))

	// zeishd killed inside the pause of a delta capture: the guest is
	// stopped, the part-made image and the device state are on disk.
	// SettleCapture, as a restarted node calls it, lets the guest run on
	// and removes both.
	cut := t.TempDir()
	cutSwap := vmm.DiskSwap{Frozen: filepath.Join(cut, "layer.qcow2"), Next: filepath.Join(filepath.Dir(src.Disk), "next-"+randomHex(3)+".qcow2")}
	leftovers := []string{partMemFile(d.imageMemFile(cut)), filepath.Join(src.Spec.Dir, deltaStateName)}
	for _, p := range leftovers {
		if err := os.WriteFile(p, []byte("cut short"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.withMonitor(ctx, src.QMPSocket, func(m *monitor) error { return m.execute(ctx, "stop", nil, nil) }); err != nil {
		t.Fatal(err)
	}
	if err := d.SettleCapture(ctx, src, cut, cutSwap, true); err != nil {
		t.Fatalf("SettleCapture: %v", err)
	}
	for _, p := range leftovers {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after SettleCapture %s is left (%v)", p, err)
		}
	}
	r.requireCounting("clone after a capture cut short", sc)
}
