package qemu

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zeish/zeish/vmm"
)

// Why a live capture inflates the source's image first: the migration reads
// every page of the source's RAM, and the source maps an image privately.
// On tmpfs a read fault on a hole allocates the page, one 4 KiB fault at a
// time, each a trip through the host's (itself virtual) MMU: measured here
// ~3 s per GiB of holes, most of a re-fork's background copy. Allocating the
// holes first from zeishd with one MADV_POPULATE_READ over a private mapping
// of the file costs ~0.6 s per GiB, and the source's reads then find every
// page present and map 16 per fault (fault-around): ~0.7 s per GiB. The
// contents do not change (a hole and an allocated zero page read the same),
// so children mapping the image see nothing.
//
// The image then stays inflated while the source runs: punching it after
// every capture (as before) made every later capture of the same source pay
// again. It is made sparse once the last inflating source is gone. Cost: the
// image holds all of its guest RAM in tmpfs meanwhile (once per image, not
// per child).

// inflations counts, per image RAM file, the live VMs whose captures
// inflated it.
type inflations struct {
	users map[string]map[string]bool // RAM file → sandbox IDs
}

// inflateSource makes every page of h's image RAM file present, unless a
// capture already did and it is still inflated. It runs while the guest does.
func (d *Driver) inflateSource(h *vmm.Handle) error {
	if d.noInflate || h.MemShared || h.MemFile == "" {
		return nil
	}
	d.inflateMu.Lock()
	users := d.inflated.users[h.MemFile]
	had := len(users) > 0
	if users == nil {
		users = map[string]bool{}
		d.inflated.users[h.MemFile] = users
	}
	users[h.Spec.ID] = true
	d.inflateMu.Unlock()
	if had {
		return nil
	}
	began := time.Now()
	if err := populate(h.MemFile); err != nil {
		return fmt.Errorf("inflate image RAM %s: %w", h.MemFile, err)
	}
	d.log.Info("image RAM inflated for a live capture", logKeySandbox, h.Spec.ID, "file", h.MemFile,
		"ms", time.Since(began).Milliseconds())
	return nil
}

// releaseSource is called when h's QEMU is gone: the last source gone makes
// its image sparse again. Without inflation (or after a zeishd restart,
// which forgets inflations) the image is punched after each capture instead.
func (d *Driver) releaseSource(h *vmm.Handle) {
	if h.MemFile == "" {
		return
	}
	d.inflateMu.Lock()
	users := d.inflated.users[h.MemFile]
	last := users[h.Spec.ID] && len(users) == 1
	delete(users, h.Spec.ID)
	if len(users) == 0 {
		delete(d.inflated.users, h.MemFile)
	}
	d.inflateMu.Unlock()
	if last {
		d.sparsifyLater(h.MemFile)
	}
}

// populate allocates every hole of the RAM file at path (tmpfs) as a zero
// page, without changing what the file reads.
func populate(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() == 0 {
		return nil
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_NORESERVE)
	if err != nil {
		return err
	}
	err = unix.Madvise(mem, unix.MADV_POPULATE_READ)
	return errors.Join(err, unix.Munmap(mem))
}
