package node

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/sparsecopy"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// sweep is one call of coldTracker.pick in a scenario.
type sweep struct {
	at    time.Duration // since the scenario's start
	cands []coldCandidate
	want  []string // images picked to move
}

func TestColdTrackerPicks(t *testing.T) {
	idle := func(id string) coldCandidate { return coldCandidate{id: id} }
	pinned := coldCandidate{id: "a", pinned: true}
	mapped := coldCandidate{id: "a", mapped: true}
	tests := []struct {
		name   string
		after  time.Duration
		sweeps []sweep
	}{
		{"first sight starts the clock", time.Minute, []sweep{
			{0, []coldCandidate{idle("a")}, nil},
			{59 * time.Second, []coldCandidate{idle("a")}, nil},
			{time.Minute, []coldCandidate{idle("a")}, []string{"a"}},
		}},
		{"disabled", 0, []sweep{
			{0, []coldCandidate{idle("a")}, nil},
			{time.Hour, []coldCandidate{idle("a")}, nil},
		}},
		{"pinned never moves and restarts the clock", time.Minute, []sweep{
			{0, []coldCandidate{idle("a")}, nil},
			{2 * time.Minute, []coldCandidate{pinned}, nil},
			{2*time.Minute + 59*time.Second, []coldCandidate{idle("a")}, nil},
			{3 * time.Minute, []coldCandidate{idle("a")}, []string{"a"}},
		}},
		{"mapped never moves and restarts the clock", time.Minute, []sweep{
			{0, []coldCandidate{idle("a")}, nil},
			{5 * time.Minute, []coldCandidate{mapped}, nil},
			{5*time.Minute + 30*time.Second, []coldCandidate{idle("a")}, nil},
			{6 * time.Minute, []coldCandidate{idle("a")}, []string{"a"}},
		}},
		{"each image on its own clock", time.Minute, []sweep{
			{0, []coldCandidate{idle("a")}, nil},
			{30 * time.Second, []coldCandidate{idle("a"), idle("b")}, nil},
			{time.Minute, []coldCandidate{idle("a"), idle("b")}, []string{"a"}},
			{90 * time.Second, []coldCandidate{idle("b")}, []string{"b"}},
		}},
		{"an image gone and back starts over", time.Minute, []sweep{
			{0, []coldCandidate{idle("a")}, nil},
			{30 * time.Second, nil, nil},
			{time.Minute, []coldCandidate{idle("a")}, nil},
			{2 * time.Minute, []coldCandidate{idle("a")}, []string{"a"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newColdTracker(tt.after)
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i, s := range tt.sweeps {
				got := tr.pick(start.Add(s.at), s.cands)
				if !slices.Equal(got, s.want) {
					t.Fatalf("sweep %d at %v: picked %v, want %v", i, s.at, got, s.want)
				}
			}
		})
	}
}

// imageRAMFile finds the RAM file of snapshot s's image.
func imageRAMFile(t *testing.T, h *harness, s *store.SnapshotRecord) (*imageMeta, string) {
	t.Helper()
	m, err := h.n.readImage(s.Image)
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

	tr := newColdTracker(time.Minute)
	now := time.Now()
	sweepAt := func(d time.Duration) { h.n.sweepCold(h.ctx, tr, now.Add(d)) }
	inShm := func() bool { _, err := os.Stat(ram); return err == nil }
	onDisk := func() bool { _, err := os.Stat(h.n.coldPath(m.ID)); return err == nil }

	// Pinned (an operation holds it): stays however old.
	unpin := h.n.pin(m.ID)
	sweepAt(0)
	sweepAt(time.Hour)
	if !inShm() || onDisk() {
		t.Fatal("a pinned image was moved to disk")
	}
	unpin()
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
	if _, err := os.Stat(filepath.Join(h.n.imageDir(m.ID), coldTemp)); !os.IsNotExist(err) {
		t.Fatalf("temp copy left: %v", err)
	}
	alloc, _ := sparsecopy.Allocated(h.n.coldPath(m.ID))
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

// TestRecoverColdSettlesInterruptedMoves: whatever moment a move between
// tmpfs and disk was cut at, Recover leaves exactly one whole copy.
func TestRecoverColdSettlesInterruptedMoves(t *testing.T) {
	tests := []struct {
		name                         string
		shm, shmTemp, cold, coldTemp bool
		wantShm, wantCold            bool
	}{
		{"cut while copying to disk", true, false, false, true, true, false},
		{"cut after the rename to disk", true, false, true, false, true, false},
		{"moved", false, false, true, false, false, true},
		{"cut while copying back", false, true, true, false, false, true},
		{"cut after the rename back", true, false, true, false, true, false},
		{"in tmpfs", true, false, false, false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			id, dir, unpin, err := h.n.newImageDir()
			if err != nil {
				t.Fatal(err)
			}
			defer unpin() // gc keeps it through Recover
			img := &vmm.Image{Dir: dir, MemFile: filepath.Join(h.opts.ShmDir, "zeish-img-"+id+".mem"), StateFile: filepath.Join(dir, "state"), MemoryMiB: 64}
			if err := h.n.writeImage(&imageMeta{ID: id, VM: img, CreatedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
			write := func(on bool, path string) {
				if on {
					if err := os.WriteFile(path, []byte("ram"), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			write(tt.shm, img.MemFile)
			write(tt.shmTemp, img.MemFile+thawSuffix)
			write(tt.cold, h.n.coldPath(id))
			write(tt.coldTemp, filepath.Join(dir, coldTemp))
			write(true, img.StateFile)
			if err := h.n.Recover(h.ctx); err != nil {
				t.Fatal(err)
			}
			exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
			if got := exists(img.MemFile); got != tt.wantShm {
				t.Errorf("tmpfs copy exists: %v, want %v", got, tt.wantShm)
			}
			if got := exists(h.n.coldPath(id)); got != tt.wantCold {
				t.Errorf("disk copy exists: %v, want %v", got, tt.wantCold)
			}
			for _, p := range []string{img.MemFile + thawSuffix, filepath.Join(dir, coldTemp)} {
				if exists(p) {
					t.Errorf("temp copy %s left", p)
				}
			}
			os.Remove(img.MemFile)
		})
	}
}
