package vmmtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/vmm"
)

// testAdopt starts a VM from an image for one spec (a ready VM) and hands
// it to another: a mismatched machine or a folder with files in it is
// refused and moves nothing; the adopted VM runs on under its new folder
// and disk, answers on its new sockets (also after a round trip through
// JSON, as a restarted zeishd reads it), can be paused, resumed and
// captured live, and its Destroy leaves nothing, cgroup included.
func testAdopt(t *testing.T, d vmm.Driver, newSpec func(t *testing.T) vmm.Spec) {
	if !d.Capabilities().LiveFork {
		testskip.Skip(t, "driver declares no live fork")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h, err := d.Start(ctx, newSpec(t))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	imgDir := t.TempDir()
	img, _, err := d.Capture(ctx, h, imgDir, false)
	if err != nil {
		d.Destroy(ctx, h)
		t.Fatalf("Capture: %v", err)
	}
	t.Cleanup(func() { os.Remove(img.MemFile) })
	layer := filepath.Join(imgDir, "layer.qcow2")
	if err := os.Rename(h.Disk, layer); err != nil {
		t.Fatal(err)
	}

	readySpec := newSpec(t)
	readySpec.BaseDisk, readySpec.From = layer, img
	readySpec.Disk = filepath.Join(t.TempDir(), "ready-disk.qcow2")
	ready, err := d.Start(ctx, readySpec)
	if err != nil {
		t.Fatalf("Start the ready VM: %v", err)
	}
	adopted := ready
	t.Cleanup(func() { destroy(t, d, adopted) })
	requireState(ctx, t, d, ready, vmm.RunStateRunning)

	spec := newSpec(t)
	spec.BaseDisk, spec.From = layer, img
	spec.Disk = filepath.Join(t.TempDir(), "disk-1.qcow2")
	// Refused, and nothing moves: another machine, a folder in use.
	other := spec
	other.MemoryMiB *= 2
	if _, err := d.Adopt(ctx, ready, other); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Adopt as a machine of another size: %v, want invalid_argument", err)
	}
	busy := filepath.Join(spec.Dir, "mine")
	if err := os.WriteFile(busy, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Adopt(ctx, ready, spec); err == nil {
		t.Error("Adopt into a folder with a file in it succeeded")
	}
	os.Remove(busy)
	if _, err := os.Stat(ready.Disk); err != nil || !d.Alive(ready) {
		t.Fatalf("a refused Adopt moved the ready VM: disk %v, alive %v", err, d.Alive(ready))
	}

	began := time.Now()
	if adopted, err = d.Adopt(ctx, ready, spec); err != nil {
		adopted = ready
		t.Fatalf("Adopt: %v", err)
	}
	t.Logf("adopted in %v", time.Since(began).Round(time.Microsecond))
	inDir := func(p string) bool { return p == "" || strings.HasPrefix(p, spec.Dir+"/") } // "": the driver has no such socket
	if adopted.Spec.ID != spec.ID || adopted.Spec.Dir != spec.Dir || adopted.Disk != spec.Disk ||
		!inDir(adopted.QMPSocket) || !inDir(adopted.AgentSocket) {
		t.Errorf("adopted handle %+v does not name the new spec's id, folder and disk", adopted)
	}
	if _, err := os.Stat(readySpec.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the ready VM's folder is still there: %v", err)
	}
	if _, err := os.Stat(readySpec.Disk); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the ready VM's disk is still under its old name: %v", err)
	}
	adopted = roundTrip(t, adopted)
	if !d.Alive(adopted) {
		t.Fatal("Alive = false for the adopted VM")
	}
	requireState(ctx, t, d, adopted, vmm.RunStateRunning)
	conn, err := d.DialAgent(ctx, adopted)
	if err != nil {
		t.Fatalf("DialAgent after Adopt: %v", err)
	}
	conn.Close()
	if err := d.Pause(ctx, adopted); err != nil {
		t.Fatalf("Pause after Adopt: %v", err)
	}
	requireState(ctx, t, d, adopted, vmm.RunStatePaused)
	if err := d.Resume(ctx, adopted); err != nil {
		t.Fatalf("Resume after Adopt: %v", err)
	}
	// A fork of it: the capture's sockets and next overlay live in the new folder.
	swapDir := t.TempDir()
	swap := vmm.DiskSwap{Frozen: filepath.Join(swapDir, "frozen.qcow2"), Next: filepath.Join(swapDir, "next.qcow2")}
	img2, pause, err := d.CaptureLive(ctx, adopted, t.TempDir(), swap)
	if err != nil {
		t.Fatalf("CaptureLive of the adopted VM: %v", err)
	}
	t.Cleanup(func() { os.Remove(img2.MemFile); os.Remove(img2.StateFile) })
	t.Logf("captured live after Adopt, paused %v", pause)
	if adopted.Disk != swap.Next {
		t.Errorf("after CaptureLive the VM writes %s, want %s", adopted.Disk, swap.Next)
	}
	requireState(ctx, t, d, adopted, vmm.RunStateRunning)

	if err := d.Destroy(ctx, adopted); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if d.Alive(adopted) {
		t.Error("Alive after Destroy")
	}
	// The process is gone (nothing names either folder), and so are the
	// files the driver keeps beside the VM, but for the capture's overlay,
	// which the caller owns (its folder goes with the sandbox).
	for _, dir := range []string{spec.Dir, readySpec.Dir} {
		if pids := procscan.Mentioning(dir); len(pids) > 0 {
			t.Errorf("processes still running for %s: %v", dir, pids)
		}
	}
	entries, _ := os.ReadDir(spec.Dir)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".qcow2") {
			t.Errorf("file left in the adopted VM's folder: %s", e.Name())
		}
	}
}
