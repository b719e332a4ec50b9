package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/internal/sparsecopy"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/vmm"
)

// Cold images. An image's RAM file (a snapshot's, a fork base's, a warm
// template's) lives in the tmpfs every running guest's RAM lives in. One
// that nothing maps and no operation has used for Options.ColdAfter is
// moved to <image dir>/mem.cold on the data dir's disk, holes kept, and
// copied back (thawed) when a VM is to start from it. image.json is never
// rewritten: it always names the tmpfs path, and where the bytes are is
// which of the two files exists.
//
// Both moves are crash-safe: the new copy is written under a temp name,
// synced and renamed, and only then is the old one removed. A crash leaves
// the old copy whole, perhaps with a temp file (removed by Recover), or
// both whole copies, of which Recover keeps the tmpfs one.

const (
	coldFile   = "mem.cold"
	coldTemp   = coldFile + ".tmp"
	thawSuffix = ".thaw" // beside the tmpfs path while a thaw copies
	// diskHeadroomMiB (lifecycle.go) is also left free on disk by a move.
)

func (n *Node) coldPath(id string) string { return filepath.Join(n.imageDir(id), coldFile) }

// coldCandidate is one image with RAM in tmpfs, as a sweep sees it.
type coldCandidate struct {
	id     string
	pinned bool // an operation holds it
	mapped bool // a VM maps it, or a record says one will
}

// coldTracker decides which images have been unused for long enough. It
// remembers since when each image has been idle; an image seen for the
// first time (after a restart, a new capture) starts idle now.
type coldTracker struct {
	after time.Duration
	idle  map[string]time.Time
}

func newColdTracker(after time.Duration) *coldTracker {
	return &coldTracker{after: after, idle: map[string]time.Time{}}
}

// pick returns the candidates to move to disk at now and forgets images
// that are no longer candidates (moved, deleted).
func (t *coldTracker) pick(now time.Time, cands []coldCandidate) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range cands {
		seen[c.id] = true
		since, known := t.idle[c.id]
		switch {
		case t.after <= 0:
		case c.pinned || c.mapped || !known:
			t.idle[c.id] = now
		case now.Sub(since) >= t.after:
			out = append(out, c.id)
		}
	}
	for id := range t.idle {
		if !seen[id] {
			delete(t.idle, id)
		}
	}
	return out
}

// coldSweepEvery is how often the sweeper looks, for a given ColdAfter.
func coldSweepEvery(after time.Duration) time.Duration {
	return min(max(after/4, 500*time.Millisecond), time.Minute)
}

// startColdSweeper moves cold images to disk in the background until the
// node closes. Off when ColdAfter is 0.
func (n *Node) startColdSweeper() {
	if n.opts.ColdAfter <= 0 {
		return
	}
	t := newColdTracker(n.opts.ColdAfter)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		tick := time.NewTicker(coldSweepEvery(n.opts.ColdAfter))
		defer tick.Stop()
		for {
			select {
			case <-n.life.Done():
				return
			case now := <-tick.C:
				n.sweepCold(n.life, t, now)
			}
		}
	}()
}

// sweepCold moves the images t picks at now to disk.
func (n *Node) sweepCold(ctx context.Context, t *coldTracker, now time.Time) {
	// Under gcMu: gc must not remove an image half moved; under coldMu: a
	// thaw waits for a move in progress (and a move for a thaw).
	n.gcMu.Lock()
	defer n.gcMu.Unlock()
	n.coldMu.Lock()
	defer n.coldMu.Unlock()
	cands, metas, err := n.coldCandidates(ctx)
	if err != nil {
		n.log.Warn("cold images: list", "err", err)
		return
	}
	for _, id := range t.pick(now, cands) {
		if err := n.freeze(metas[id]); err != nil {
			n.log.Warn("cold images: move to disk", "image", id, "err", err)
			continue
		}
	}
}

// coldCandidates lists the images whose RAM is in tmpfs, with whether
// anything uses them. Pins are read last, under coldMu (held by the
// caller): a start pins its image before it thaws it, which takes coldMu.
func (n *Node) coldCandidates(ctx context.Context) ([]coldCandidate, map[string]*imageMeta, error) {
	mapped := map[string]bool{}
	rows, err := n.opts.Store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return nil, nil, err
	}
	for _, r := range rows {
		if h, _ := r.VMHandle(); h != nil && h.Spec.From != nil {
			mapped[filepath.Base(h.Spec.From.Dir)] = true
		}
	}
	// Whatever the records say, a live process naming the file maps it (a
	// VM launched whose handle is not recorded yet, another VMM).
	inUse := procscan.OptionValues("mem-path")
	entries, _ := os.ReadDir(n.imagesDir())
	var cands []coldCandidate
	metas := map[string]*imageMeta{}
	for _, e := range entries {
		m, err := n.readImage(e.Name())
		if err != nil || m.VM == nil || m.VM.MemFile == "" {
			continue
		}
		if _, err := os.Lstat(m.VM.MemFile); err != nil {
			continue // on disk already, or gone
		}
		metas[m.ID] = m
		cands = append(cands, coldCandidate{id: m.ID, mapped: mapped[m.ID] || inUse[m.VM.MemFile]})
	}
	n.mu.Lock()
	for i := range cands {
		cands[i].pinned = n.pinned[cands[i].id] > 0
	}
	n.mu.Unlock()
	return cands, metas, nil
}

// freeze moves image m's RAM file from tmpfs to its folder on disk: copy
// (holes kept) to a temp file, sync, rename, sync the folder, and only then
// remove the tmpfs file. Caller holds coldMu.
func (n *Node) freeze(m *imageMeta) error {
	alloc, err := sparsecopy.Allocated(m.VM.MemFile)
	if err != nil {
		return err
	}
	dir := n.imageDir(m.ID)
	if free, ok := datadir.FreeMiB(dir); ok && int64(free) < alloc>>20+diskHeadroomMiB {
		return fmt.Errorf("%d MiB free in the data dir, the image holds %d MiB: %w", free, alloc>>20, errdefs.ErrStorageFull)
	}
	began := time.Now()
	if err := copyDurably(m.VM.MemFile, filepath.Join(dir, coldTemp), filepath.Join(dir, coldFile), true); err != nil {
		return err
	}
	if err := os.Remove(m.VM.MemFile); err != nil {
		return err
	}
	n.log.Info("cold image moved to disk", "image", m.ID, "mib", alloc>>20, "ms", time.Since(began).Milliseconds())
	return nil
}

// thaw makes sure the RAM file of img (an image a VM is about to start
// from) is in tmpfs, copying it back from disk if it went cold. The caller
// holds a pin on the image, so it cannot go cold again before the VM maps
// it.
func (n *Node) thaw(img *vmm.Image) error {
	if img == nil || img.MemFile == "" {
		return nil
	}
	n.coldMu.Lock()
	defer n.coldMu.Unlock()
	if _, err := os.Lstat(img.MemFile); err == nil {
		return nil
	}
	id := filepath.Base(img.Dir)
	cold := n.coldPath(id)
	alloc, err := sparsecopy.Allocated(cold)
	if err != nil {
		return fmt.Errorf("image %s: its memory is neither in %s nor on disk: %w", id, n.opts.ShmDir, err)
	}
	if free, ok := tmpfsFreeMiB(filepath.Dir(img.MemFile)); ok && int64(free) < alloc>>20+shmHeadroomMiB {
		return fmt.Errorf("host %s has %d MiB left in %s; image %s needs %d MiB back there: %w",
			n.opts.ID, free, filepath.Dir(img.MemFile), id, alloc>>20, errdefs.ErrStorageFull)
	}
	began := time.Now()
	// tmpfs needs no sync; the rename is what makes the copy whole.
	if err := copyDurably(cold, img.MemFile+thawSuffix, img.MemFile, false); err != nil {
		return err
	}
	if err := os.Remove(cold); err != nil {
		return err
	}
	datadir.SyncDir(n.imageDir(id))
	n.log.Info("cold image back in memory", "image", id, "mib", alloc>>20, "ms", time.Since(began).Milliseconds())
	return nil
}

// copyDurably copies src to tmp (new, 0600, never through a link), holes
// kept, optionally synced, then renames it to dst and syncs dst's folder.
func copyDurably(src, tmp, dst string, sync bool) (err error) {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	_, err = sparsecopy.Copy(out, in)
	if err == nil && sync {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	if sync {
		return datadir.SyncDir(filepath.Dir(dst))
	}
	return nil
}

// recoverCold settles moves a crash interrupted: temp copies go, and where
// both whole copies exist the tmpfs one stays (image.json names it).
func (n *Node) recoverCold() {
	entries, _ := os.ReadDir(n.imagesDir())
	for _, e := range entries {
		id := e.Name()
		os.Remove(filepath.Join(n.imageDir(id), coldTemp))
		m, err := n.readImage(id)
		if err != nil || m.VM == nil || m.VM.MemFile == "" {
			continue
		}
		os.Remove(m.VM.MemFile + thawSuffix)
		if _, err := os.Lstat(m.VM.MemFile); err == nil {
			if err := os.Remove(n.coldPath(id)); err == nil {
				n.log.Info("recover: image memory in tmpfs and on disk; removed the disk copy", "image", id)
			}
		}
	}
}

// imageDiskMiB is the RAM of cold images, on disk, as allocated.
func (n *Node) imageDiskMiB() int {
	entries, _ := os.ReadDir(n.imagesDir())
	var bytes int64
	for _, e := range entries {
		if b, err := sparsecopy.Allocated(n.coldPath(e.Name())); err == nil {
			bytes += b
		} else if !errors.Is(err, fs.ErrNotExist) {
			n.log.Warn("cold image size", "image", e.Name(), "err", err)
		}
	}
	return int((bytes + 1<<20 - 1) >> 20)
}
