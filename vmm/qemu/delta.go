package qemu

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/internal/sparsecopy"
	"github.com/zeish/zeish/vmm"
)

// Delta capture: a VM started from an image maps that image's RAM file
// privately, so its guest memory is the old image plus the pages it wrote
// since (anonymous copies the kernel made on its writes). Its new image is
// exactly that: a copy of the old file, made by the kernel while the guest
// runs, then, with the guest stopped, the VM's private pages written over
// it, found in /proc/PID/pagemap and read through /proc/PID/mem. Device
// state is saved without RAM (xen-save-devices-state). No second VMM, no
// migration stream: the pause holds the private pages' copy, which is what
// the source wrote, not its RAM size.

// pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent = 1 << 63
	pmSwapped = 1 << 62
	pmFile    = 1 << 61 // file page or shared anonymous: the file's content
)

// privatePage reports whether a pagemap entry is a page the process holds
// apart from its mapped file: present and anonymous (a copy made on
// write), or swapped out (only anonymous pages are).
func privatePage(e uint64) bool {
	return e&pmSwapped != 0 || (e&pmPresent != 0 && e&pmFile == 0)
}

// ramMapping finds where process pid maps file (its guest RAM), size bytes
// long, from its offset 0.
func ramMapping(pid int, file string, size int64) (uintptr, error) {
	var want syscall.Stat_t
	if err := syscall.Stat(file, &want); err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[2] != "00000000" {
			continue
		}
		if ino, err := strconv.ParseUint(fields[4], 10, 64); err != nil || ino != want.Ino {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || int64(end-start) != size {
			continue
		}
		return uintptr(start), nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no mapping of %s (%d bytes) in process %d: %w", file, size, pid, errdefs.ErrInternal)
}

// privateCopier writes a process's private pages of one mapping into a
// file at the same offsets.
type privateCopier struct {
	pagemap, mem *os.File
	addr         uintptr
	size         int64
	entries      []byte
	buf          []byte
	noScan       bool // no PAGEMAP_SCAN: read the pagemap
}

func openPrivateCopier(pid int, addr uintptr, size int64) (*privateCopier, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	pm, err := os.Open(dir + "/pagemap")
	if err != nil {
		return nil, err
	}
	mem, err := os.Open(dir + "/mem")
	if err != nil {
		pm.Close()
		return nil, err
	}
	return &privateCopier{pagemap: pm, mem: mem, addr: addr, size: size,
		entries: make([]byte, 8*8192), buf: make([]byte, 1<<20)}, nil
}

func (c *privateCopier) close() {
	c.pagemap.Close()
	c.mem.Close()
}

// eachRun calls fn for every run of consecutive private pages: its first
// page and length, in pages from the mapping's start. PAGEMAP_SCAN (Linux
// ≥ 6.7) returns only those runs and skips page tables never filled; else
// the pagemap is read whole (8 bytes per page: 8 MiB at 4 GiB, read in
// the pause).
func (c *privateCopier) eachRun(fn func(first, n int64) error) error {
	if !c.noScan {
		err := c.scanRuns(fn)
		if !errors.Is(err, syscall.ENOTTY) && !errors.Is(err, syscall.EINVAL) {
			return err
		}
		c.noScan = true // an older kernel
	}
	return c.readRuns(fn)
}

// PAGEMAP_SCAN's argument and result (linux/fs.h).
type pmScanArg struct {
	size, flags, start, end, walkEnd, vec, vecLen, maxPages uint64
	categoryInverted, categoryMask, categoryAnyofMask       uint64
	returnMask                                              uint64
}

type pageRegion struct{ start, end, categories uint64 }

const (
	pagemapScan   = 0xc0606610 // _IOWR('f', 16, struct pm_scan_arg)
	pageIsFile    = 1 << 2
	pageIsPresent = 1 << 3
	pageIsSwapped = 1 << 4
)

// scanRuns is eachRun by PAGEMAP_SCAN: pages that are not the file's and
// are present or swapped out, as privatePage says.
func (c *privateCopier) scanRuns(fn func(first, n int64) error) error {
	regions := make([]pageRegion, 512)
	end := uint64(c.addr) + uint64(c.size)
	for at := uint64(c.addr); at < end; {
		arg := pmScanArg{start: at, end: end, vec: uint64(uintptr(unsafe.Pointer(&regions[0]))), vecLen: uint64(len(regions)),
			categoryInverted: pageIsFile, categoryMask: pageIsFile, categoryAnyofMask: pageIsPresent | pageIsSwapped,
			returnMask: pageIsFile | pageIsPresent | pageIsSwapped}
		arg.size = uint64(unsafe.Sizeof(arg))
		n, _, errno := syscall.Syscall(syscall.SYS_IOCTL, c.pagemap.Fd(), pagemapScan, uintptr(unsafe.Pointer(&arg)))
		runtime.KeepAlive(regions)
		if errno != 0 {
			return errno
		}
		for _, r := range regions[:n] {
			if err := fn(int64(r.start-uint64(c.addr))/pageSize, int64(r.end-r.start)/pageSize); err != nil {
				return err
			}
		}
		if arg.walkEnd <= at {
			return fmt.Errorf("pagemap scan stuck at %#x: %w", at, errdefs.ErrInternal)
		}
		at = arg.walkEnd
	}
	return nil
}

// readRuns is eachRun by reading the pagemap.
func (c *privateCopier) readRuns(fn func(first, n int64) error) error {
	npages := c.size / pageSize
	runStart, runLen := int64(-1), int64(0)
	flush := func() error {
		if runLen == 0 {
			return nil
		}
		err := fn(runStart, runLen)
		runStart, runLen = -1, 0
		return err
	}
	for first := int64(0); first < npages; {
		n := min(npages-first, int64(len(c.entries)/8))
		b := c.entries[:n*8]
		if _, err := c.pagemap.ReadAt(b, int64(c.addr/pageSize+uintptr(first))*8); err != nil {
			return fmt.Errorf("pagemap: %w", err)
		}
		for i := int64(0); i < n; i++ {
			if !privatePage(binary.LittleEndian.Uint64(b[i*8:])) {
				if err := flush(); err != nil {
					return err
				}
				continue
			}
			if runLen == 0 {
				runStart = first + i
			}
			runLen++
		}
		first += n
	}
	return flush()
}

// count is the number of private pages.
func (c *privateCopier) count() (pages int64, err error) {
	err = c.eachRun(func(_, n int64) error { pages += n; return nil })
	return pages, err
}

// copyTo writes every private page into dst at its offset in the mapping;
// it returns how many.
func (c *privateCopier) copyTo(dst *os.File) (pages int64, err error) {
	err = c.eachRun(func(first, n int64) error {
		pages += n
		for n > 0 {
			chunk := min(n*pageSize, int64(len(c.buf)))
			off := first * pageSize
			if _, err := c.mem.ReadAt(c.buf[:chunk], int64(c.addr)+off); err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("read guest pages at %#x: %w", off, err)
			}
			if _, err := dst.WriteAt(c.buf[:chunk], off); err != nil {
				return err
			}
			first += chunk / pageSize
			n -= chunk / pageSize
		}
		return nil
	})
	return pages, err
}

// deltaStateName is the device-state save in the source's folder (QEMU
// writes it from its chroot) until it moves into the image.
const deltaStateName = "delta.state"

// defaultDeltaMaxMiB is Options.DeltaMaxMiB's default: a source holding
// more private RAM is captured by a live migration, whose pause does not
// grow with what the guest wrote (the private pages' copy here costs ~1.5
// ms per MiB under TCG on the test host).
const defaultDeltaMaxMiB = 32

// deltaConfig remembers the configuration section seen last: one is
// enough, all of a node's VMs share it.
type deltaConfig struct {
	mu    sync.Mutex
	bytes []byte
}

// tryDelta captures h by its private pages when it can (a VM started from
// an image, holding at most the limit privately). ok false: it did
// nothing, and the caller migrates.
func (d *Driver) tryDelta(ctx context.Context, h *vmm.Handle, dir string, swap vmm.DiskSwap) (_ *vmm.Image, _ time.Duration, ok bool, err error) {
	if d.deltaMaxMiB < 0 || h.MemShared || h.MemFile == "" {
		return nil, 0, false, nil
	}
	decline := func(why string, args ...any) (*vmm.Image, time.Duration, bool, error) {
		d.log.Info("capture migrates: "+why, append([]any{logKeySandbox, h.Spec.ID}, args...)...)
		return nil, 0, false, nil
	}
	config, err := d.configFor(h)
	if err != nil {
		return decline("no configuration section to give its state", "err", err)
	}
	size := int64(h.Spec.MemoryMiB) << 20
	addr, err := ramMapping(h.PID, h.MemFile, size)
	if err != nil {
		return decline("its RAM's mapping is not found", "err", err)
	}
	pc, err := openPrivateCopier(h.PID, addr, size)
	if err != nil {
		return decline("its pages cannot be read", "err", err)
	}
	defer pc.close()
	pages, err := pc.count()
	if err != nil {
		return decline("its pages cannot be counted", "err", err)
	}
	if mib := pages * pageSize >> 20; mib > int64(d.deltaMaxMiB) {
		return decline("it holds more private RAM than a delta's limit", "private_mib", mib, "limit_mib", d.deltaMaxMiB)
	}
	img, pause, err := d.captureDelta(ctx, h, dir, swap, pc, config)
	return img, pause, true, err
}

// configFor is the configuration section of h's image, or the one seen
// last if that image's state is gone.
func (d *Driver) configFor(h *vmm.Handle) ([]byte, error) {
	d.delta.mu.Lock()
	defer d.delta.mu.Unlock()
	var err error
	if h.Spec.From != nil {
		var config []byte
		if config, err = configSection(h.Spec.From.StateFile); err == nil {
			d.delta.bytes = config
			return config, nil
		}
	}
	if d.delta.bytes != nil {
		return d.delta.bytes, nil
	}
	return nil, cmp.Or(err, fmt.Errorf("vm %q has no image: %w", h.Spec.ID, errdefs.ErrInvalidState))
}

// captureDelta captures h, a VM whose RAM is an image's file mapped
// privately, into dir: the old image copied while the guest runs, then a
// pause for its private pages, the disk swap and the device state.
func (d *Driver) captureDelta(ctx context.Context, h *vmm.Handle, dir string, swap vmm.DiskSwap, pc *privateCopier, config []byte) (_ *vmm.Image, pause time.Duration, err error) {
	img := d.newLiveImage(h, dir)
	began := time.Now()
	var undo rollback.Stack
	defer d.undoCapture(ctx, &undo, h, "by its private pages", &err)
	// The old image's copy, while the disk swap is prepared.
	tmpMem := partMemFile(img.MemFile)
	undo.Add(func(context.Context) error { return removeFiles(tmpMem, img.MemFile) })
	copied := make(chan error, 1)
	var out *os.File
	go func() {
		copied <- func() error {
			src, err := os.Open(h.MemFile)
			if err != nil {
				return err
			}
			defer src.Close()
			if out, err = os.OpenFile(tmpMem, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
				return err
			}
			_, err = sparsecopy.Copy(out, src)
			return err
		}()
	}()
	tmpNext, perr := d.prepareSwap(ctx, &undo, h, swap)
	if cerr := <-copied; cerr != nil || perr != nil {
		if out != nil {
			out.Close()
		}
		return nil, 0, errors.Join(perr, cerr)
	}
	defer out.Close()
	prepared := time.Now()

	stateTmp := filepath.Join(h.Spec.Dir, deltaStateName)
	undo.Add(func(context.Context) error { return removeFiles(stateTmp) })
	if err := removeFiles(stateTmp); err != nil {
		return nil, 0, err
	}
	nextNode := nextNodeName(tmpNext)
	var stopped, resumed, pagesAt, swappedAt, savedAt time.Time
	var pages int64
	swapped := false
	err = d.withMonitor(ctx, h.QMPSocket, func(m *monitor) error {
		if err := m.execute(ctx, "blockdev-add", map[string]any{
			"driver": "qcow2", "node-name": nextNode, "backing": nil,
			"file": d.fileNode(map[string]any{"driver": "file", "node-name": nextNode + fileNodeSuffix, "filename": d.guestPath(h, tmpNext)})}, nil); err != nil {
			return fmt.Errorf("open next overlay: %w", err)
		}
		node, _, err := activeDisk(ctx, m)
		if err != nil {
			return err
		}
		if err := m.execute(ctx, "stop", nil, nil); err != nil {
			return err
		}
		stopped = time.Now()
		err = func() error {
			var err error
			if pages, err = pc.copyTo(out); err != nil {
				return err
			}
			pagesAt = time.Now()
			if err := m.execute(ctx, "blockdev-snapshot", map[string]any{"node": node, "overlay": nextNode}, nil); err != nil {
				return fmt.Errorf("swap disk: %w", err)
			}
			swapped, swappedAt = true, time.Now()
			if err := m.execute(ctx, "xen-save-devices-state", map[string]any{"filename": d.guestPath(h, stateTmp), "live": false}, nil); err != nil {
				return fmt.Errorf("save device state: %w", err)
			}
			savedAt = time.Now()
			return nil
		}()
		if cerr := m.execute(context.WithoutCancel(ctx), "cont", nil, nil); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cont: %w", cerr))
		}
		resumed = time.Now()
		if !swapped {
			_ = m.execute(context.WithoutCancel(ctx), "blockdev-del", map[string]any{"node-name": nextNode}, nil)
		}
		return err
	})
	if swapped {
		h.Disk = swap.Next
	}
	if err != nil {
		return nil, 0, err
	}
	if err := withConfigSection(img.StateFile, stateTmp, config); err != nil {
		return nil, 0, err
	}
	removeFiles(stateTmp)
	if err := os.Rename(tmpMem, img.MemFile); err != nil {
		return nil, 0, err
	}
	if err := sealImageFile(img.MemFile); err != nil {
		return nil, 0, err
	}
	undo.Release()
	d.deltaCaptures.Add(1)
	pause = resumed.Sub(stopped)
	d.log.Info("vm captured by its private pages", logKeySandbox, h.Spec.ID, "image", dir, "pause_ms", pause.Milliseconds(),
		"pages_ms", pagesAt.Sub(stopped).Milliseconds(), "private_mib", pages*pageSize>>20, "private_bytes", pages*pageSize,
		"swap_ms", swappedAt.Sub(pagesAt).Milliseconds(), "save_ms", savedAt.Sub(swappedAt).Milliseconds(),
		"cont_ms", resumed.Sub(savedAt).Milliseconds(), "prepare_ms", prepared.Sub(began).Milliseconds(),
		"copy_ms", time.Since(began).Milliseconds(), "image_mib", allocatedMiB(img.MemFile), "disk", h.Disk)
	return img, pause, nil
}

// partMemFile is where a delta capture writes the image's RAM until it is
// complete.
func partMemFile(memFile string) string { return memFile + ".part" }
