package images

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/node/budget"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/internal/sparsecopy"
	"github.com/zeish/zeish/vmm"
)

// The cold tier. An image's RAM file (a snapshot's, a fork base's, a warm
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
)

// DiskHeadroomMiB is data-dir space a write of guest memory must leave free.
const DiskHeadroomMiB = 256

// coldTier keeps image RAM on the data dir's disk.
type coldTier struct {
	s *Store
	// mu serialises moves of image RAM between tmpfs and disk.
	mu sync.Mutex
}

var _ Tier = (*coldTier)(nil)

func (c *coldTier) Name() string          { return "cold" }
func (c *coldTier) path(id string) string { return filepath.Join(c.s.Dir(id), coldFile) }

// Put copies image m's RAM file from tmpfs to its folder on disk: copy
// (holes kept) to a temp file, sync, rename, sync the folder.
func (c *coldTier) Put(_ context.Context, m *Meta) error {
	alloc, err := sparsecopy.Allocated(m.VM.MemFile)
	if err != nil {
		return err
	}
	dir := c.s.Dir(m.ID)
	if free, ok := datadir.FreeMiB(dir); ok && int64(free) < alloc>>20+DiskHeadroomMiB {
		return fmt.Errorf("%d MiB free in the data dir, the image holds %d MiB: %w", free, alloc>>20, errdefs.ErrStorageFull)
	}
	return copyDurably(m.VM.MemFile, filepath.Join(dir, coldTemp), filepath.Join(dir, coldFile), true)
}

// Fetch copies the disk copy of img's RAM back to tmpfs and removes it.
func (c *coldTier) Fetch(_ context.Context, img *vmm.Image) error {
	id := filepath.Base(img.Dir)
	cold := c.path(id)
	alloc, err := sparsecopy.Allocated(cold)
	if err != nil {
		return fmt.Errorf("not on disk: %w", err)
	}
	if free, ok := datadir.FreeMiB(filepath.Dir(img.MemFile)); ok && int64(free) < alloc>>20+budget.ShmHeadroomMiB {
		return fmt.Errorf("host %s has %d MiB left in %s; image %s needs %d MiB back there: %w",
			c.s.opts.Host, free, filepath.Dir(img.MemFile), id, alloc>>20, errdefs.ErrStorageFull)
	}
	began := time.Now()
	// tmpfs needs no sync; the rename is what makes the copy whole.
	if err := copyDurably(cold, img.MemFile+thawSuffix, img.MemFile, false); err != nil {
		return err
	}
	if err := os.Remove(cold); err != nil {
		return err
	}
	datadir.SyncDir(c.s.Dir(id))
	c.s.log.Info("cold image back in memory", "image", id, "mib", alloc>>20, "ms", time.Since(began).Milliseconds())
	return nil
}

// Drop removes the disk copy of image id's RAM.
func (c *coldTier) Drop(id string) error {
	if err := os.Remove(c.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// settle finishes moves a crash interrupted: temp copies go, and where
// both whole copies exist the tmpfs one stays (image.json names it).
func (c *coldTier) settle() {
	entries, _ := os.ReadDir(c.s.opts.Dir)
	for _, e := range entries {
		id := e.Name()
		os.Remove(filepath.Join(c.s.Dir(id), coldTemp))
		m, err := c.s.Read(id)
		if err != nil || m.VM == nil || m.VM.MemFile == "" {
			continue
		}
		os.Remove(m.VM.MemFile + thawSuffix)
		if _, err := os.Lstat(m.VM.MemFile); err == nil {
			if err := os.Remove(c.path(id)); err == nil {
				c.s.log.Info("recover: image memory in tmpfs and on disk; removed the disk copy", "image", id)
			}
		}
	}
}

// Recover settles moves between tmpfs and the cold tier that a crash
// interrupted. Call it before the first Collect.
func (s *Store) Recover() { s.cold.settle() }

// ColdMiB is the RAM of cold images, on disk, as allocated.
func (s *Store) ColdMiB() int {
	entries, _ := os.ReadDir(s.opts.Dir)
	var bytes int64
	for _, e := range entries {
		if b, err := sparsecopy.Allocated(s.cold.path(e.Name())); err == nil {
			bytes += b
		} else if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("cold image size", "image", e.Name(), "err", err)
		}
	}
	return toMiB(bytes)
}

// RunCold moves images idle for Options.ColdAfter to the cold tier until
// ctx ends. It returns at once when ColdAfter is 0.
func (s *Store) RunCold(ctx context.Context) {
	if s.opts.ColdAfter <= 0 {
		return
	}
	t := NewColdTracker(s.opts.ColdAfter)
	tick := time.NewTicker(coldSweepEvery(s.opts.ColdAfter))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			s.SweepCold(ctx, t, now)
		}
	}
}

// coldSweepEvery is how often the sweeper looks, for a given ColdAfter.
func coldSweepEvery(after time.Duration) time.Duration {
	return min(max(after/4, 500*time.Millisecond), time.Minute)
}

// SweepCold moves the images t picks at now to the cold tier.
func (s *Store) SweepCold(ctx context.Context, t *ColdTracker, now time.Time) {
	// Under gcMu: gc must not remove an image half moved; under the cold
	// tier's lock: a thaw waits for a move in progress (and a move for a
	// thaw).
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	s.cold.mu.Lock()
	defer s.cold.mu.Unlock()
	cands, metas, err := s.coldCandidates(ctx)
	if err != nil {
		s.log.Warn("cold images: list", "err", err)
		return
	}
	for _, id := range t.pick(now, cands) {
		if err := s.moveCold(ctx, metas[id]); err != nil {
			s.log.Warn("cold images: move to disk", "image", id, "err", err)
		}
	}
}

// moveCold puts image m's RAM in the cold tier and only then removes the
// tmpfs file. The caller holds the cold tier's lock.
func (s *Store) moveCold(ctx context.Context, m *Meta) error {
	began := time.Now()
	if err := s.cold.Put(ctx, m); err != nil {
		return err
	}
	if err := os.Remove(m.VM.MemFile); err != nil {
		return err
	}
	alloc, _ := sparsecopy.Allocated(s.cold.path(m.ID))
	s.log.Info("cold image moved to disk", "image", m.ID, "mib", alloc>>20, "ms", time.Since(began).Milliseconds())
	return nil
}

// coldCandidates lists the images whose RAM is in tmpfs, with whether
// anything uses them. Leases are read last, under the cold tier's lock
// (held by the caller): a start leases its image before it thaws it,
// which takes that lock.
func (s *Store) coldCandidates(ctx context.Context) ([]coldCandidate, map[string]*Meta, error) {
	mapped, err := s.opts.Referrers.Mapped(ctx)
	if err != nil {
		return nil, nil, err
	}
	// Whatever the records say, a live process naming the file maps it (a
	// VM launched whose handle is not recorded yet, another VMM).
	inUse := procscan.OptionValues("mem-path")
	var cands []coldCandidate
	metas := map[string]*Meta{}
	for _, m := range s.All() {
		if m.VM == nil || m.VM.MemFile == "" {
			continue
		}
		if fi, err := os.Lstat(m.VM.MemFile); err != nil {
			continue // on disk already, or gone
		} else if fi.Mode()&os.ModeSymlink != 0 {
			continue // served lazily (Remote.Lazy) until its prefetch makes it local
		}
		metas[m.ID] = m
		cands = append(cands, coldCandidate{id: m.ID, mapped: mapped[m.ID] || inUse[m.VM.MemFile]})
	}
	for i := range cands {
		cands[i].leased = s.Leased(cands[i].id)
	}
	return cands, metas, nil
}

// coldCandidate is one image with RAM in tmpfs, as a sweep sees it.
type coldCandidate struct {
	id     string
	leased bool // an operation holds a lease on it
	mapped bool // a VM maps it, or a record says one will
}

// ColdTracker decides which images have been unused for long enough. It
// remembers since when each image has been idle; an image seen for the
// first time (after a restart, a new capture) starts idle now.
type ColdTracker struct {
	after time.Duration
	idle  map[string]time.Time
}

// NewColdTracker tracks images for a move after being idle for after.
func NewColdTracker(after time.Duration) *ColdTracker {
	return &ColdTracker{after: after, idle: map[string]time.Time{}}
}

// pick returns the candidates to move to disk at now and forgets images
// that are no longer candidates (moved, deleted).
func (t *ColdTracker) pick(now time.Time, cands []coldCandidate) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range cands {
		seen[c.id] = true
		since, known := t.idle[c.id]
		switch {
		case t.after <= 0:
		case c.leased || c.mapped || !known:
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
