package vmmtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/vmm"
)

// testCaptureLive captures VMs into images while they run: a booted VM
// that owns its RAM, then a clone (whose RAM is an image's) and a clone of
// that clone's image. Every source keeps running on the new overlay, every
// image starts, and a refused capture changes nothing.
func testCaptureLive(t *testing.T, d vmm.Driver, newSpec func(t *testing.T) vmm.Spec) {
	if !d.Capabilities().LiveCapture {
		t.Log("driver declares no live capture: nothing to check")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	src := start(t, d, newSpec(t))
	requireState(ctx, t, d, src, vmm.RunStateRunning)

	// A swap without paths is refused before anything happens.
	disk := src.Disk
	if _, _, err := d.CaptureLive(ctx, src, t.TempDir(), vmm.DiskSwap{}); err == nil {
		t.Fatal("CaptureLive without a disk swap must fail")
	}
	if src.Disk != disk {
		t.Fatalf("a refused capture changed the disk to %s", src.Disk)
	}
	requireState(ctx, t, d, src, vmm.RunStateRunning)
	// A paused guest is refused, and stays paused and capturable.
	if err := d.Pause(ctx, src); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.CaptureLive(ctx, src, t.TempDir(), vmm.DiskSwap{Frozen: filepath.Join(t.TempDir(), "f"), Next: disk + ".next"}); err == nil {
		t.Fatal("CaptureLive of a paused guest must be refused")
	}
	requireState(ctx, t, d, src, vmm.RunStatePaused)
	if err := d.Resume(ctx, src); err != nil {
		t.Fatal(err)
	}

	// captureLive captures h live and starts a VM from the image.
	captureLive := func(what string, h *vmm.Handle) *vmm.Handle {
		t.Helper()
		dir := t.TempDir()
		swap := vmm.DiskSwap{Frozen: filepath.Join(dir, "layer.qcow2"), Next: filepath.Join(filepath.Dir(h.Disk), "next-"+filepath.Base(dir)+".qcow2")}
		img, pause, err := d.CaptureLive(ctx, h, dir, swap)
		if err != nil {
			t.Fatalf("%s: CaptureLive: %v", what, err)
		}
		t.Cleanup(func() { os.Remove(img.MemFile) })
		t.Logf("%s: captured live, paused %v", what, pause)
		if pause <= 0 || h.Disk != swap.Next || img.MemFile == "" || img.MemFile == h.MemFile {
			t.Fatalf("%s: pause %v, disk %s (want %s), image %+v, source RAM %s", what, pause, h.Disk, swap.Next, img, h.MemFile)
		}
		for _, f := range []string{img.MemFile, img.StateFile, swap.Frozen, swap.Next} {
			if _, err := os.Stat(f); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 2 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Errorf("%s: image folder holds %s; want only the state and the frozen layer", what, strings.Join(names, ", "))
		}
		requireState(ctx, t, d, h, vmm.RunStateRunning)
		spec := newSpec(t)
		spec.BaseDisk, spec.From = swap.Frozen, img
		c := start(t, d, spec)
		if c.MemShared || c.MemFile != img.MemFile {
			t.Fatalf("%s: a VM started from the image must map its RAM privately: %+v", what, c)
		}
		requireState(ctx, t, d, c, vmm.RunStateRunning)
		return c
	}
	clone := captureLive("a VM that owns its RAM", src)
	grandchild := captureLive("a clone", clone)
	captureLive("the clone again", clone)
	captureLive("a clone of a clone", grandchild)
	requireState(ctx, t, d, src, vmm.RunStateRunning)
}
