package vmmtest

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/vmm"
)

// testCaptureAndClones captures a running VM into an image, starts two VMs
// from it (copy-on-write memory, overlays on the frozen disk), promotes one
// into a VM that owns its RAM, captures that one fully (suspend) and starts
// it again from the full image on its own disk.
func testCaptureAndClones(t *testing.T, d vmm.Driver, newSpec func(t *testing.T) vmm.Spec) {
	if !d.Capabilities().LiveFork || !d.Capabilities().Suspend {
		testskip.Skip(t, "driver declares no live fork or suspend")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	parentSpec := newSpec(t)
	h, err := d.Start(ctx, parentSpec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if !h.MemShared {
		t.Fatal("a booted VM must own its RAM (MemShared)")
	}
	imgDir := t.TempDir()
	img, stoppedAt, err := d.Capture(ctx, h, imgDir, false)
	if err != nil {
		d.Destroy(ctx, h)
		t.Fatalf("Capture: %v", err)
	}
	t.Cleanup(func() { os.Remove(img.MemFile) })
	if d.Alive(h) || stoppedAt.IsZero() {
		t.Fatalf("after Capture: alive %v, stoppedAt %v", d.Alive(h), stoppedAt)
	}
	for _, f := range []string{img.MemFile, img.StateFile, h.Disk} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("image file: %v", err)
		}
	}
	// An image is the driver's own: no VM user may write what other VMs map.
	requirePrivate(t, "image RAM", img.MemFile, os.Geteuid())
	requirePrivate(t, "image state", img.StateFile, os.Geteuid())
	layer := filepath.Join(imgDir, "layer.qcow2")
	if err := os.Rename(h.Disk, layer); err != nil {
		t.Fatal(err)
	}

	var clones []*vmm.Handle
	for i := 0; i < 2; i++ {
		spec := newSpec(t)
		spec.BaseDisk, spec.From = layer, img
		began := time.Now()
		c, err := d.Start(ctx, spec)
		if err != nil {
			t.Fatalf("Start clone %d: %v", i, err)
		}
		t.Logf("clone %d running %v after Start", i, time.Since(began).Round(time.Millisecond))
		t.Cleanup(func() { destroy(t, d, c) })
		if c.MemShared || c.MemFile != img.MemFile {
			t.Fatalf("clone %d must map the image's RAM privately: %+v", i, c)
		}
		requireState(ctx, t, d, c, vmm.RunStateRunning)
		clones = append(clones, c)
	}
	// Destroying a clone must leave the image's RAM for the other.
	destroy(t, d, clones[0])
	if _, err := os.Stat(img.MemFile); err != nil {
		t.Fatalf("destroying a clone removed the image's RAM: %v", err)
	}

	if _, _, err := d.Capture(ctx, clones[1], t.TempDir(), false); err == nil {
		t.Fatal("a clone's RAM is not its own: Capture without full must be refused")
	}
	promoted, downtime, err := d.Promote(ctx, clones[1], t.TempDir())
	if err != nil {
		t.Fatalf("Promote: %v", err)
	}
	t.Cleanup(func() { destroy(t, d, promoted) })
	t.Logf("promoted with %v downtime", downtime)
	if !promoted.MemShared || d.Alive(clones[1]) || promoted.Disk != clones[1].Disk {
		t.Fatalf("promoted: %+v (old alive %v)", promoted, d.Alive(clones[1]))
	}
	requireState(ctx, t, d, promoted, vmm.RunStateRunning)

	// A promoted VM owns its RAM again: it can be captured cheaply and cloned.
	img2Dir := t.TempDir()
	img2, _, err := d.Capture(ctx, promoted, img2Dir, false)
	if err != nil {
		t.Fatalf("Capture of a promoted VM: %v", err)
	}
	t.Cleanup(func() { os.Remove(img2.MemFile) })
	layer2 := filepath.Join(img2Dir, "layer.qcow2")
	if err := os.Rename(promoted.Disk, layer2); err != nil {
		t.Fatal(err)
	}
	spec2 := newSpec(t)
	spec2.BaseDisk, spec2.From = layer2, img2
	promoted, err = d.Start(ctx, spec2)
	if err != nil {
		t.Fatalf("Start a clone of a promoted VM: %v", err)
	}
	t.Cleanup(func() { destroy(t, d, promoted) })
	time.Sleep(2 * time.Second)
	requireState(ctx, t, d, promoted, vmm.RunStateRunning)
	if promoted, _, err = d.Promote(ctx, promoted, t.TempDir()); err != nil {
		t.Fatalf("Promote again: %v", err)
	}
	t.Cleanup(func() { destroy(t, d, promoted) })

	full, _, err := d.Capture(ctx, promoted, t.TempDir(), true)
	if err != nil {
		t.Fatalf("full Capture: %v", err)
	}
	if full.MemFile != "" {
		t.Fatalf("a full image has its RAM in the state file: %+v", full)
	}
	requirePrivate(t, "full image state", full.StateFile, os.Geteuid())
	if _, err := os.Stat(promoted.MemFile); err == nil {
		t.Fatal("a full capture must remove the VM's own RAM file")
	}
	spec := newSpec(t)
	spec.BaseDisk, spec.Disk, spec.From = "", promoted.Disk, full
	resumed, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start from a full image: %v", err)
	}
	t.Cleanup(func() { destroy(t, d, resumed) })
	if !resumed.MemShared {
		t.Fatal("a VM loaded from a full image owns its RAM")
	}
	requireState(ctx, t, d, resumed, vmm.RunStateRunning)
	// Loading must not leave the whole guest RAM allocated, zeros included.
	var st syscall.Stat_t
	if err := syscall.Stat(resumed.MemFile, &st); err != nil {
		t.Fatal(err)
	}
	if mib := int(st.Blocks * 512 >> 20); mib >= spec.MemoryMiB*9/10 {
		t.Errorf("VM loaded from a full image holds %d MiB of its %d MiB RAM file", mib, spec.MemoryMiB)
	}
}
