package qemu

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zeish/zeish/internal/sparsecopy"
	"github.com/zeish/zeish/vmm"
)

// Why images are made sparse again: a clone maps its image's RAM file
// share=off, and promoting it (a migration) reads every guest page. On tmpfs
// a read fault on a hole allocates a page, so after one promotion the image
// holds all of guest RAM, zeros included (131 MiB became 1024 MiB for a 1 GiB
// guest), and so does the promoted VM's own file, since the migration
// destination reads each page to skip writing zeros. Once a file is an
// image nobody writes it any more (every mapping of it is private), so its
// zero pages can be punched out while clones run on it: a clone that reads
// such a page again gets zeros, as before.

// pageSize is the unit of guest RAM that sparsify inspects.
const pageSize = 4096

// sparsify punches a hole over every all-zero page of an immutable RAM file
// and returns how many bytes it freed. Holes already there are skipped.
func sparsify(path string) (freed int64, err error) {
	// Never through a link: the file sits in a world-writable tmpfs.
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fd := int(f.Fd())
	err = sparsecopy.EachData(f, make([]byte, 2<<20), func(chunk []byte, off int64) error {
		got, err := punchZeroPages(fd, chunk, off)
		freed += got
		return err
	})
	return freed, err
}

// punchZeroPages frees the runs of all-zero pages of buf, read at off.
func punchZeroPages(fd int, buf []byte, off int64) (int64, error) {
	var freed int64
	run := int64(-1) // start of the current run of zero pages
	flush := func(end int64) error {
		if run < 0 {
			return nil
		}
		err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off+run, end-run)
		if err == nil {
			freed += end - run
		}
		run = -1
		return err
	}
	for p := int64(0); p+pageSize <= int64(len(buf)); p += pageSize {
		if isZero(buf[p : p+pageSize]) {
			if run < 0 {
				run = p
			}
		} else if err := flush(p); err != nil {
			return freed, err
		}
	}
	return freed, flush(int64(len(buf)) / pageSize * pageSize)
}

var zeroPage = make([]byte, pageSize)

func isZero(page []byte) bool { return bytes.Equal(page, zeroPage) }

// sparsifyLater makes an image's RAM file sparse in the background: it
// costs a read of the file, which must not add to any pause.
func (d *Driver) sparsifyLater(path string) {
	d.background.Add(1)
	go func() {
		defer d.background.Done()
		// At the lowest CPU priority, so that it never slows a pause or a
		// boot. The niced thread is never unlocked: it ends with this
		// goroutine instead of going back to the scheduler's pool.
		runtime.LockOSThread()
		_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19)
		began := time.Now()
		freed, err := sparsify(path)
		switch {
		case errors.Is(err, os.ErrNotExist): // deleted meanwhile
		case err != nil:
			d.log.Warn("sparsify image RAM", "file", path, "err", err)
		case freed > 0:
			d.log.Info("image RAM made sparse", "file", path, "freed_mib", freed>>20,
				"ms", time.Since(began).Milliseconds())
		}
	}()
}

// punchLoadedRAM makes the RAM file of a VM just loaded from a full image
// sparse. Loading allocated every page of it, zeros included (the
// destination reads each page to skip writing zeros), so a started sandbox
// held all of its guest RAM. The guest is still paused, and nothing writes
// guest memory while it is, so this is the one moment it is safe.
func (d *Driver) punchLoadedRAM(h *vmm.Handle) {
	began := time.Now()
	freed, err := sparsify(h.MemFile)
	if err != nil {
		d.log.Warn("sparsify loaded RAM", logKeySandbox, h.Spec.ID, "err", err)
		return
	}
	d.log.Info("loaded RAM made sparse", logKeySandbox, h.Spec.ID, "freed_mib", freed>>20,
		"ms", time.Since(began).Milliseconds())
}

// allocatedMiB is how much of a file's size holds pages (for logs; 0 when
// it cannot be read).
func allocatedMiB(path string) int64 {
	b, _ := sparsecopy.Allocated(path)
	return b >> 20
}
