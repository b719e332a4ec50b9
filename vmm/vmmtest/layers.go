package vmmtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeish/zeish/vmm"
)

// testMergedLayers captures a running VM live twice, so that its disk
// stands on two frozen layers over its base, merges them into one and
// moves the VM onto the merge: the merge stands on the base, the VM keeps
// running on the same overlay, which now names the merge, and can be
// captured again, and a VM starts from that capture. A merge down to a file
// outside the chain and a rebase onto a missing layer are refused and change nothing.
func testMergedLayers(t *testing.T, d vmm.Driver, newSpec func(t *testing.T) vmm.Spec) {
	if !d.Capabilities().LiveCapture {
		t.Log("driver declares no live capture: nothing to check")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	spec := newSpec(t)
	base := spec.BaseDisk
	h := start(t, d, spec)
	requireState(ctx, t, d, h, vmm.RunStateRunning)
	if base == "" {
		if base, _ = d.DiskBacking(h.Disk); base == "" {
			t.Fatal("the driver's test VM has no base disk to merge down to")
		}
	}
	capture := func() (*vmm.Image, string) {
		t.Helper()
		dir := t.TempDir()
		swap := vmm.DiskSwap{Frozen: filepath.Join(dir, "layer.qcow2"), Next: filepath.Join(filepath.Dir(h.Disk), "next-"+filepath.Base(dir)+".qcow2")}
		img, _, err := d.CaptureLive(ctx, h, dir, swap)
		if err != nil {
			t.Fatalf("CaptureLive: %v", err)
		}
		t.Cleanup(func() { os.Remove(img.MemFile) })
		return img, swap.Frozen
	}
	_, first := capture()
	_, second := capture()
	if b, err := d.DiskBacking(second); err != nil || b != first {
		t.Fatalf("second layer backed by %q (%v), want %s", b, err, first)
	}

	out := filepath.Join(t.TempDir(), "merged.qcow2")
	if err := d.MergeLayers(ctx, second, filepath.Join(t.TempDir(), "elsewhere.qcow2"), out); err == nil {
		t.Error("MergeLayers down to a file outside the chain succeeded")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("a refused merge left %s: %v", out, err)
	}
	if err := d.MergeLayers(ctx, second, base, out); err != nil {
		t.Fatalf("MergeLayers: %v", err)
	}
	if b, err := d.DiskBacking(out); err != nil || b != base {
		t.Fatalf("merged layer backed by %q (%v), want %s", b, err, base)
	}
	if err := d.MergeLayers(ctx, second, base, out); err == nil {
		t.Error("MergeLayers over an existing file succeeded")
	}

	// A layer that is not there is refused.
	if err := d.Rebase(ctx, h, filepath.Join(t.TempDir(), "missing.qcow2")); err == nil {
		t.Error("Rebase onto a missing layer succeeded")
	}
	if b, _ := d.DiskBacking(h.Disk); b != second {
		t.Fatalf("after a refused rebase the overlay is backed by %s, want %s", b, second)
	}

	began := time.Now()
	if err := d.Rebase(ctx, h, out); err != nil {
		t.Fatalf("Rebase: %v", err)
	}
	t.Logf("rebased in %v", time.Since(began).Round(time.Microsecond))
	if b, err := d.DiskBacking(h.Disk); err != nil || b != out {
		t.Fatalf("after Rebase the overlay is backed by %q (%v), want %s", b, err, out)
	}
	requireState(ctx, t, d, h, vmm.RunStateRunning)
	// The old layers may go: the VM needs only the merge and the base.
	if err := os.Remove(first); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(second); err != nil {
		t.Fatal(err)
	}
	// A second merge and move: the first merge is no longer needed by the VM.
	_, third := capture()
	again := filepath.Join(t.TempDir(), "merged-again.qcow2")
	if err := d.MergeLayers(ctx, third, base, again); err != nil {
		t.Fatalf("MergeLayers again: %v", err)
	}
	if err := d.Rebase(ctx, h, again); err != nil {
		t.Fatalf("Rebase again: %v", err)
	}
	// Nothing in the VM's folder keeps the first merge's file alive.
	firstMerge, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(h.Spec.Dir, func(p string, e os.DirEntry, err error) error {
		if fi, serr := os.Stat(p); err == nil && serr == nil && os.SameFile(fi, firstMerge) {
			t.Errorf("%s still names the merge the VM left", p)
		}
		return nil
	})
	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}
	out = again
	img, frozen := capture()
	if b, err := d.DiskBacking(frozen); err != nil || b != out {
		t.Fatalf("the next frozen layer is backed by %q (%v), want %s", b, err, out)
	}
	requireState(ctx, t, d, h, vmm.RunStateRunning)
	cspec := newSpec(t)
	cspec.BaseDisk, cspec.From = frozen, img
	c := start(t, d, cspec)
	requireState(ctx, t, d, c, vmm.RunStateRunning)
}
