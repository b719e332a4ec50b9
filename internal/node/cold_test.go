package node

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/sparsecopy"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// imageRAMFile finds the RAM file of snapshot s's image.
func imageRAMFile(t *testing.T, h *harness, s *store.SnapshotRecord) (*images.Meta, string) {
	t.Helper()
	m, err := h.n.images.Read(s.Image)
	if err != nil || m.VM == nil || m.VM.MemFile == "" {
		t.Fatalf("snapshot %s: no image with RAM: %v", s.ID, err)
	}
	return m, m.VM.MemFile
}

// fillSparse makes path a sparse RAM file of size with a marker written.
func fillSparse(t *testing.T, path string, size int64, marker []byte, at int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	f.Truncate(size)
	if _, err := f.WriteAt(marker, at); err != nil {
		t.Fatal(err)
	}
}

// TestColdImagesMoveToDiskAndBack: a snapshot's image nothing maps goes to
// disk (holes kept, tmpfs file gone), one a VM maps or an operation holds
// stays, and a clone of the snapshot brings it back whole.
func TestColdImagesMoveToDiskAndBack(t *testing.T) {
	h := newHarness(t)
	if err := h.n.Recover(h.ctx); err != nil {
		t.Fatal(err)
	}
	sb := h.create("src", sandbox.StateRunning)
	snap := h.snapshot(sb.ID, "s1")
	m, ram := imageRAMFile(t, h, snap)
	const size = 64 << 20
	marker := []byte("guest memory marker")
	fillSparse(t, ram, size, marker, 40<<20)

	tr := images.NewColdTracker(time.Minute)
	now := time.Now()
	sweepAt := func(d time.Duration) { h.n.images.SweepCold(h.ctx, tr, now.Add(d)) }
	inShm := func() bool { _, err := os.Stat(ram); return err == nil }
	onDisk := func() bool { _, err := os.Stat(filepath.Join(h.n.images.Dir(m.ID), "mem.cold")); return err == nil }

	// Pinned (an operation holds it): stays however old.
	lease := h.n.images.Lease(m.ID)
	sweepAt(0)
	sweepAt(time.Hour)
	if !inShm() || onDisk() {
		t.Fatal("a pinned image was moved to disk")
	}
	lease.Release()
	// The source may map the image it was captured into: once it is
	// stopped (its own memory saved whole, on disk), nothing does.
	if _, err := h.n.Stop(h.ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.settle(sb.ID, sandbox.StateStopped)
	sweepAt(time.Hour + 59*time.Second) // last seen pinned at 1h
	if !inShm() {
		t.Fatal("moved before it was idle for ColdAfter")
	}
	sweepAt(time.Hour + time.Minute)
	if inShm() || !onDisk() {
		t.Fatalf("idle image not moved: in tmpfs %v, on disk %v", inShm(), onDisk())
	}
	if _, err := os.Stat(filepath.Join(h.n.images.Dir(m.ID), "mem.cold.tmp")); !os.IsNotExist(err) {
		t.Fatalf("temp copy left: %v", err)
	}
	alloc, _ := sparsecopy.Allocated(filepath.Join(h.n.images.Dir(m.ID), "mem.cold"))
	if alloc > 1<<20 {
		t.Errorf("disk copy of a %d-byte image with one page written takes %d bytes: holes lost", size, alloc)
	}
	if c, _ := h.n.Capacity(); c.ImageDiskMiB < 1 || c.ImageRAMMiB != 0 {
		t.Errorf("capacity says image RAM %d MiB in tmpfs, %d MiB on disk; want 0 and >0", c.ImageRAMMiB, c.ImageDiskMiB)
	}

	// A clone of the snapshot brings it back and maps it: it stays.
	kids, err := h.n.CloneSnapshot(h.ctx, snap.ID, []*store.SandboxRecord{{}})
	if err != nil {
		t.Fatal(err)
	}
	h.settle(kids[0].ID, sandbox.StateRunning)
	if !inShm() || onDisk() {
		t.Fatalf("clone of a cold snapshot: in tmpfs %v, on disk %v; want back in tmpfs only", inShm(), onDisk())
	}
	got := make([]byte, len(marker))
	f, err := os.Open(ram)
	if err != nil {
		t.Fatal(err)
	}
	f.ReadAt(got, 40<<20)
	st, _ := f.Stat()
	f.Close()
	if !bytes.Equal(got, marker) || st.Size() != size {
		t.Fatalf("thawed image: marker %q, size %d; want %q, %d", got, st.Size(), marker, size)
	}
	if fi, _ := os.Stat(ram); fi.Mode().Perm() != 0o600 {
		t.Errorf("thawed RAM file mode %v, want 0600", fi.Mode().Perm())
	}
	sweepAt(3 * time.Hour)
	sweepAt(4 * time.Hour)
	if !inShm() || onDisk() {
		t.Fatal("an image a running clone maps was moved to disk")
	}
	// gc removes a cold image's disk copy with the image.
	for _, k := range kids {
		h.n.Delete(h.ctx, k.ID)
		h.settle(k.ID, sandbox.StateDestroyed)
	}
	sweepAt(5 * time.Hour)
	sweepAt(6 * time.Hour)
	if !onDisk() {
		t.Fatal("image not moved once its clone was gone")
	}
	if err := h.n.DeleteSnapshot(h.ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	// Its disk layer may stay (the stopped source's disk is backed by
	// it); its memory must not.
	if onDisk() || inShm() {
		t.Fatalf("deleted snapshot's image memory survives: in tmpfs %v, on disk %v", inShm(), onDisk())
	}
}
