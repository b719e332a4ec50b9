package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/vmm"
)

// Live capture (docs/qemu.md, "Forking a VM whose RAM is an image's"):
//
//   - A receiver QEMU is launched with -incoming defer -S on a NEW share=on
//     RAM file: the image's. It is never started, so once the migration is
//     over its RAM is the guest's at the switch-over instant and stays so.
//   - The source live-migrates into it (pre-copy while the guest runs;
//     x-ignore-shared off on both sides, so all RAM moves whoever owns it).
//     On QEMU ≥ 10 multifd with zero-page-detection=multifd lets the
//     receiver skip zero pages without touching them: the copy takes 0.5 s
//     at 256 MiB and 1.5 s at 4 GiB instead of 1 s and 19 s, and the new
//     file holds only non-zero pages.
//   - pause-before-switchover stops the migration once the guest is stopped
//     for the last pass: the disk is frozen right there (blockdev-snapshot-
//     sync onto a new overlay), so disk and RAM are of one instant.
//   - On completion the source is sent cont at once (retried while QEMU says
//     "not finalized"): it pauses ~20–40 ms, flat in RAM size, and runs on
//     untouched, on whatever RAM it had.
//   - The receiver then saves its device state with x-ignore-shared on
//     (its RAM file is the image's memory) and quits.
//
// VMMs are chrooted in their own folders: zeishd relays the migration from
// a socket in the source's folder to the receiver's, one connection per
// multifd channel.

const (
	receiverDirName = "rcv" // the receiver's folder inside the image folder
	// nextDiskPrefix names the source's next overlay inside its folder: a
	// second name of swap.Next that the VMM can open from its chroot. It stays
	// while the VM runs: QEMU reopens a frozen overlay read-only by name, and
	// a name reused by the next capture would hand it another file.
	nextDiskPrefix = "next-"
	// defaultLiveDowntimeMS is how long QEMU may expect the last pass to
	// stop the guest at first (Options.LiveDowntimeMS overrides it); from
	// pass downtimeEscalateAfter on it doubles every pass, up to
	// maxLiveDowntimeMS, so that a guest dirtying memory faster than it
	// can be copied still switches over (see liveDowntimeFor).
	defaultLiveDowntimeMS = 5
	downtimeEscalateAfter = 6
	maxLiveDowntimeMS     = 2000
	multifdChannels       = 2
	// contRetry is how often cont is repeated while QEMU refuses it as
	// "Migration is not finalized yet" right after completion.
	contRetry   = 500 * time.Microsecond
	contTimeout = 5 * time.Second
)

// liveMultifd reports whether live captures use multifd with zero-page
// detection (added in QEMU 9.0; measured on 10).
func (d *Driver) liveMultifd() bool { return d.version.atLeast(10, 0) }

// imageMemFile is where a live capture puts the image's RAM, named after
// the image folder like a capture's renamed RAM file.
func (d *Driver) imageMemFile(dir string) string {
	return filepath.Join(d.shmDir, "zeish-img-"+filepath.Base(dir)+".mem")
}

type capability struct {
	Capability string `json:"capability"`
	State      bool   `json:"state"`
}

func setCapabilities(ctx context.Context, m *monitor, caps ...capability) error {
	return m.execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": caps}, nil)
}

// CaptureLive captures h into dir while its guest keeps running.
func (d *Driver) CaptureLive(ctx context.Context, h *vmm.Handle, dir string, swap vmm.DiskSwap) (_ *vmm.Image, pause time.Duration, err error) {
	if !d.Alive(h) {
		return nil, 0, fmt.Errorf("capture vm %q live: %w: qemu is not running", h.Spec.ID, errdefs.ErrUnavailable)
	}
	// A paused guest would be left "postmigrate", a state QEMU refuses to
	// migrate from again: a paused VM is better captured stopped (it loses no
	// run time either way).
	if st, err := d.State(ctx, h); err != nil {
		return nil, 0, err
	} else if st != vmm.RunStateRunning {
		return nil, 0, fmt.Errorf("capture vm %q live: %w: its guest is %s, not running", h.Spec.ID, errdefs.ErrInvalidState, st)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, 0, err
	}
	if img, pause, ok, err := d.tryDelta(ctx, h, dir, swap); ok {
		return img, pause, err
	}
	img := d.newLiveImage(h, dir)
	began := time.Now()
	var undo rollback.Stack
	defer d.undoCapture(ctx, &undo, h, "live", &err)
	oldDisk := h.Disk
	// The source's image is inflated while the disk and the receiver are
	// prepared (two cores: the receiver's QEMU start overlaps it).
	inflated := make(chan error, 1)
	go func() { inflated <- d.inflateSource(h) }()
	waitInflated := sync.OnceFunc(func() {
		// Not fatal: the source's own reads allocate what is missing.
		if err := <-inflated; err != nil {
			d.log.Warn("live capture without inflated source", logKeySandbox, h.Spec.ID, "err", err)
		}
	})
	defer waitInflated()
	tmpNext, rh, err := d.prepareLive(ctx, &undo, h, dir, img.MemFile, swap)
	if err != nil {
		return nil, 0, err
	}
	prepared := time.Now()
	waitInflated()
	inflatedAt := time.Now()
	relaySock := filepath.Join(h.Spec.Dir, relaySockName)
	relay, err := newRelay(relaySock, migrateSocket(rh))
	if err != nil {
		return nil, 0, err
	}
	defer relay.close()
	if err := d.confine.own(relaySock); err != nil {
		return nil, 0, err
	}
	sw := switchover{d: d, h: h, uri: "unix:" + d.guestPath(h, relaySock), nextFile: d.guestPath(h, tmpNext), nextNode: nextNodeName(tmpNext)}
	if err := d.withMonitor(ctx, h.QMPSocket, sw.run(ctx)); err != nil {
		if sw.swapped {
			h.Disk = swap.Next
		}
		return nil, 0, err
	}
	h.Disk = swap.Next
	copied := time.Now()
	if err := d.saveReceiver(ctx, rh, img); err != nil {
		return nil, 0, err
	}
	undo.Release()
	os.RemoveAll(rh.Spec.Dir)
	if d.noInflate && !h.MemShared && h.MemFile != "" {
		d.sparsifyLater(h.MemFile) // the source read, and so allocated, every page of its image
	}
	if !d.liveMultifd() {
		d.sparsifyLater(img.MemFile) // the receiver wrote zero pages too
	}
	d.log.Info("vm captured live", logKeySandbox, h.Spec.ID, "image", dir, "pause_ms", sw.pause.Milliseconds(),
		"stop_to_seen_ms", sw.seen.Sub(sw.stopped).Milliseconds(), "swap_ms", sw.swappedAt.Sub(sw.seen).Milliseconds(),
		"last_pass_ms", sw.completed.Sub(sw.swappedAt).Milliseconds(),
		"cont_ms", sw.resumed.Sub(sw.completed).Milliseconds(), "cont_retries", sw.contRetries, "chain", sw.chain,
		"passes", sw.passes, "downtime_limit_ms", sw.downtime,
		"copy_ms", copied.Sub(began).Milliseconds(), "prepare_ms", prepared.Sub(began).Milliseconds(),
		"inflate_wait_ms", inflatedAt.Sub(prepared).Milliseconds(), "migrate_ms", copied.Sub(inflatedAt).Milliseconds(),
		"save_ms", time.Since(copied).Milliseconds(), "image_mib", allocatedMiB(img.MemFile),
		"multifd", d.liveMultifd(), "old_disk", oldDisk, "disk", h.Disk)
	return img, sw.pause, nil
}

// newLiveImage is the image a live capture of h into dir makes.
func (d *Driver) newLiveImage(h *vmm.Handle, dir string) *vmm.Image {
	return &vmm.Image{Dir: dir, StateFile: filepath.Join(dir, stateName), MemFile: d.imageMemFile(dir), MemoryMiB: h.Spec.MemoryMiB}
}

// undoCapture undoes a failed capture of h (the way it went: "live", "by
// its private pages") and says so in its error.
func (d *Driver) undoCapture(ctx context.Context, undo *rollback.Stack, h *vmm.Handle, way string, errp *error) {
	if *errp == nil {
		return
	}
	if rbErr := undo.Run(context.WithoutCancel(ctx)); rbErr != nil {
		d.log.Error("capture rollback incomplete", logKeySandbox, h.Spec.ID, "way", way, "err", rbErr)
	}
	*errp = fmt.Errorf("capture vm %q %s: %w", h.Spec.ID, way, *errp)
}

// prepareLive prepares the disk swap and launches the receiver. The
// receiver's launch (QEMU's start-up, 250–450 ms here) and the disk's
// preparation (two qemu-img runs) do not depend on each other: side by
// side, the copy starts sooner, and so do the children, who wait for it.
func (d *Driver) prepareLive(ctx context.Context, undo *rollback.Stack, h *vmm.Handle, dir, memFile string, swap vmm.DiskSwap) (tmpNext string, rh *vmm.Handle, err error) {
	if d.liveSerialPrep {
		if tmpNext, err = d.prepareSwap(ctx, undo, h, swap); err != nil {
			return "", nil, err
		}
		rh, err = d.launchReceiver(ctx, undo, h, dir, memFile)
		return tmpNext, rh, err
	}
	var rundo rollback.Stack
	var rerr error
	launched := make(chan struct{})
	go func() {
		defer close(launched)
		rh, rerr = d.launchReceiver(ctx, &rundo, h, dir, memFile)
	}()
	tmpNext, err = d.prepareSwap(ctx, undo, h, swap)
	<-launched
	undo.Add(rundo.Run) // the receiver goes first, as when launched second
	if err = errors.Join(err, rerr); err != nil {
		return "", nil, err
	}
	return tmpNext, rh, nil
}

// prepareSwap links h's overlay as swap.Frozen and makes the next overlay,
// backed by it, inside h's folder (a confined QEMU opens it from its
// chroot), linked as swap.Next. It returns the in-folder path.
func (d *Driver) prepareSwap(ctx context.Context, undo *rollback.Stack, h *vmm.Handle, swap vmm.DiskSwap) (string, error) {
	if swap.Frozen == "" || swap.Next == "" {
		return "", fmt.Errorf("disk swap %+v: %w: both paths are needed", swap, errdefs.ErrInvalidArgument)
	}
	size, err := d.diskSize(ctx, h)
	if err != nil {
		return "", err
	}
	if err := os.Link(h.Disk, swap.Frozen); err != nil {
		return "", fmt.Errorf("link disk as frozen layer: %w", err)
	}
	// Removed on failure only while the VM still writes its old overlay.
	undo.Add(func(context.Context) error {
		if h.Disk != swap.Next {
			return removeFiles(swap.Frozen)
		}
		return nil
	})
	tmpNext := filepath.Join(h.Spec.Dir, nextDiskPrefix+randomHex(4)+".qcow2")
	out, err := exec.CommandContext(ctx, d.qemuImgPath, "create", "-q", "-u", "-f", "qcow2",
		"-b", swap.Frozen, "-F", "qcow2", tmpNext, size).CombinedOutput()
	undo.Add(func(context.Context) error {
		if h.Disk != swap.Next {
			return removeFiles(tmpNext, swap.Next)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("qemu-img create next overlay: %w: %s", err, tail(string(out), 1024))
	}
	if err := d.confine.own(tmpNext); err != nil {
		return "", err
	}
	if err := os.Link(tmpNext, swap.Next); err != nil {
		return "", fmt.Errorf("link next overlay: %w", err)
	}
	return tmpNext, nil
}

// diskSize is the virtual size of h's disk, as qemu-img takes it.
func (d *Driver) diskSize(ctx context.Context, h *vmm.Handle) (string, error) {
	if h.Spec.DiskMiB > 0 {
		return strconv.Itoa(h.Spec.DiskMiB) + "M", nil
	}
	// -U: the running VM holds the image's lock.
	out, err := exec.CommandContext(ctx, d.qemuImgPath, "info", "-U", "--output=json", h.Disk).Output()
	if err != nil {
		return "", fmt.Errorf("qemu-img info %s: %w", h.Disk, err)
	}
	var info struct {
		VirtualSize int64 `json:"virtual-size"`
	}
	if err := json.Unmarshal(out, &info); err != nil || info.VirtualSize <= 0 {
		return "", fmt.Errorf("qemu-img info %s: no virtual size (%v)", h.Disk, err)
	}
	return strconv.FormatInt(info.VirtualSize, 10), nil
}

// receiverSpec is the receiver's VM: h's devices, in dir/rcv, on a
// throwaway disk of its own (it never runs, so its disk is never read).
func receiverSpec(h *vmm.Handle, dir string) vmm.Spec {
	spec := h.Spec
	spec.Dir = filepath.Join(dir, receiverDirName)
	spec.From, spec.BaseDisk, spec.Paused, spec.Deferred = nil, "", false, false
	spec.Disk = filepath.Join(spec.Dir, diskName)
	return spec
}

// receiverHandle names the files of the receiver in dir (for cleanup after
// a crash, when no handle of it was kept).
func receiverHandle(h *vmm.Handle, dir string) *vmm.Handle {
	spec := receiverSpec(h, dir)
	return &vmm.Handle{Spec: spec, QMPSocket: filepath.Join(spec.Dir, qmpName), AgentSocket: filepath.Join(spec.Dir, agentName),
		Disk: spec.Disk, Confined: h.Confined}
}

// launchReceiver starts the never-started VM that h migrates into, mapping
// memFile shared, and lets it wait for the stream.
func (d *Driver) launchReceiver(ctx context.Context, undo *rollback.Stack, h *vmm.Handle, dir, memFile string) (*vmm.Handle, error) {
	spec := receiverSpec(h, dir)
	if err := os.MkdirAll(spec.Dir, 0o700); err != nil {
		return nil, err
	}
	undo.Add(removeDir(spec.Dir))
	size, err := d.diskSize(ctx, h)
	if err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, d.qemuImgPath, "create", "-q", "-f", "qcow2", spec.Disk, size).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("receiver disk: %w: %s", err, tail(string(out), 1024))
	}
	spec, err = validate(spec)
	if err != nil {
		return nil, err
	}
	os.Remove(memFile)
	rh, err := d.launchVM(ctx, undo, spec, memFile, true, true, true)
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	err = d.withMonitor(ctx, rh.QMPSocket, func(m *monitor) error {
		caps := []capability{{"x-ignore-shared", false}}
		if d.liveMultifd() {
			caps = append(caps, capability{"multifd", true})
		}
		if err := setCapabilities(ctx, m, caps...); err != nil {
			return err
		}
		if d.liveMultifd() {
			if err := m.execute(ctx, "migrate-set-parameters", map[string]any{
				"multifd-channels": multifdChannels, "zero-page-detection": "multifd"}, nil); err != nil {
				return err
			}
		}
		return m.execute(ctx, "migrate-incoming", map[string]any{"uri": "unix:" + d.guestPath(rh, migrateSocket(rh))}, nil)
	})
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	return rh, nil
}

func removeDir(dir string) func(context.Context) error {
	return func(context.Context) error { return os.RemoveAll(dir) }
}

// saveReceiver writes the receiver's device state (its RAM file is the
// image's memory) into img and lets it go.
func (d *Driver) saveReceiver(ctx context.Context, rh *vmm.Handle, img *vmm.Image) error {
	err := d.withMonitor(ctx, rh.QMPSocket, func(m *monitor) error {
		if err := waitIncoming(ctx, m); err != nil {
			return err
		}
		caps := []capability{{"x-ignore-shared", true}}
		if d.liveMultifd() {
			caps = append(caps, capability{"multifd", false}) // the state goes through one socket
		}
		if err := setCapabilities(ctx, m, caps...); err != nil {
			return err
		}
		sock := filepath.Join(rh.Spec.Dir, saveSockName)
		sink, err := newStateSink(sock, img.StateFile)
		if err != nil {
			return err
		}
		defer sink.close()
		if err := d.confine.own(sock); err != nil {
			return err
		}
		if err := m.execute(ctx, "migrate", map[string]any{"uri": "unix:" + d.guestPath(rh, sock)}, nil); err != nil {
			return err
		}
		if _, err := waitMigration(ctx, m); err != nil {
			return err
		}
		if err := sink.wait(ctx); err != nil {
			return err
		}
		_ = m.execute(ctx, "quit", nil, nil)
		return nil
	})
	if err != nil {
		os.Remove(img.StateFile)
		return fmt.Errorf("save receiver state: %w", err)
	}
	d.reap(rh)
	return nil
}

// switchover drives the source's side of a live capture over one QMP
// session: settings, migrate, the disk swap at pre-switchover, cont.
type switchover struct {
	d        *Driver
	h        *vmm.Handle
	uri      string
	nextFile string // the next overlay as the VMM names it
	nextNode string // its node name once opened

	wasRunning bool
	swapped    bool
	pause      time.Duration
	// Where the pause went, for the log: stop → pre-switchover seen, disk
	// swapped, last pass completed, resumed (cont accepted after
	// contRetries refusals).
	seen, swappedAt, completed time.Time
	stopped, resumed           time.Time
	contRetries                int
	chain                      int // qcow2 layers under the guest's disk before the swap
	passes                     int // pre-copy passes QEMU started
	downtime                   int // downtime-limit at the switch-over, ms
}

// liveDowntimeFor is the downtime-limit (ms) for pre-copy pass pass
// (1: the bulk copy) when it starts at base. QEMU stops the guest once it
// expects to send what is left within the limit: a low limit keeps the last
// pass (the pause) short, since an idle or lightly writing guest converges
// in a few passes. A guest that dirties memory about as fast as it is
// copied never would: from pass downtimeEscalateAfter on the limit doubles
// with every pass, so it switches over after a bounded number of passes
// with a longer pause instead of migrating forever.
func liveDowntimeFor(base, pass int) int {
	if pass < downtimeEscalateAfter || base >= maxLiveDowntimeMS {
		return base
	}
	shift := min(pass-downtimeEscalateAfter+1, 16)
	return min(base<<shift, maxLiveDowntimeMS)
}

func (s *switchover) run(ctx context.Context) func(m *monitor) error {
	return func(m *monitor) error {
		events := m.events()
		var st qmpStatus
		if err := m.execute(ctx, "query-status", nil, &st); err != nil {
			return err
		}
		s.wasRunning = st.Running
		node, _, chain, err := activeDiskChain(ctx, m)
		if err != nil {
			return err
		}
		s.chain = chain
		// Settings first: every round trip after the stop is pause.
		caps := []capability{{"x-ignore-shared", false}, {"pause-before-switchover", true}, {"events", true}}
		params := map[string]any{"max-bandwidth": localBandwidth, "downtime-limit": s.d.liveDowntimeMS}
		if s.d.liveMultifd() {
			caps = append(caps, capability{"multifd", true})
			params["multifd-channels"], params["zero-page-detection"] = multifdChannels, "multifd"
		}
		if err := setCapabilities(ctx, m, caps...); err != nil {
			return err
		}
		if err := m.execute(ctx, "migrate-set-parameters", params, nil); err != nil {
			return err
		}
		// Whatever happens, the next save of this VM (a capture, a stop)
		// goes through one socket again.
		defer func() {
			off := []capability{{"pause-before-switchover", false}}
			if s.d.liveMultifd() {
				off = append(off, capability{"multifd", false})
			}
			if err := setCapabilities(context.WithoutCancel(ctx), m, off...); err != nil {
				s.d.log.Warn("reset migration capabilities", logKeySandbox, s.h.Spec.ID, "err", err)
			}
		}()
		// The next overlay is opened now, while the guest runs: at the
		// switch-over only the graph changes.
		if err := m.execute(ctx, "blockdev-add", map[string]any{
			"driver": "qcow2", "node-name": s.nextNode, "backing": nil,
			"file": s.d.fileNode(map[string]any{"driver": "file", "node-name": s.nextNode + fileNodeSuffix, "filename": s.nextFile})}, nil); err != nil {
			return fmt.Errorf("open next overlay: %w", err)
		}
		if err := m.execute(ctx, "migrate", map[string]any{"uri": s.uri}, nil); err != nil {
			s.abort(ctx, m)
			return err
		}
		downtime := s.d.liveDowntimeMS
		_, err = waitStatusPasses(ctx, m, events, "pre-switchover", func(pass int) error {
			s.passes = pass
			next := liveDowntimeFor(s.d.liveDowntimeMS, pass)
			if next == downtime {
				return nil
			}
			downtime = next
			return m.execute(ctx, "migrate-set-parameters", map[string]any{"downtime-limit": next}, nil)
		})
		if err != nil {
			s.abort(ctx, m)
			return err
		}
		s.downtime = downtime
		s.seen = time.Now()
		stopped := s.seen
		if ts, ok := events.last("STOP"); ok {
			stopped = ts
		}
		s.stopped = stopped
		// The guest is stopped and the last pass not sent yet: freeze the
		// disk at this instant.
		err = m.execute(ctx, "blockdev-snapshot", map[string]any{"node": node, "overlay": s.nextNode}, nil)
		if err != nil {
			s.abort(ctx, m)
			return fmt.Errorf("swap disk: %w", err)
		}
		s.swapped, s.swappedAt = true, time.Now()
		if err := m.execute(ctx, "migrate-continue", map[string]any{"state": "pre-switchover"}, nil); err != nil {
			s.abort(ctx, m)
			return err
		}
		if _, err := waitStatus(ctx, m, events, "completed"); err != nil {
			s.abort(ctx, m)
			return err
		}
		s.completed = time.Now()
		resumed := s.completed
		if s.wasRunning {
			retries, err := contAfterMigration(context.WithoutCancel(ctx), m)
			s.contRetries = retries
			if err != nil {
				return err
			}
			resumed = time.Now()
			if ts, ok := events.wait("RESUME", 100*time.Millisecond); ok {
				resumed = ts
			}
		}
		s.resumed = resumed
		if s.wasRunning {
			s.pause = resumed.Sub(stopped)
		}
		return nil
	}
}

// abort cancels the migration and, once it has ended, lets a guest that was
// running before run again (QEMU restarts it itself on most failures).
func (s *switchover) abort(ctx context.Context, m *monitor) {
	ctx = context.WithoutCancel(ctx)
	if err := settleMigration(ctx, m, s.wasRunning); err != nil {
		s.d.log.Error("resume after failed live capture", logKeySandbox, s.h.Spec.ID, "err", err)
	}
	if !s.swapped {
		_ = m.execute(ctx, "blockdev-del", map[string]any{"node-name": s.nextNode}, nil)
	}
}

// nextNodeName is the node name of the next overlay at path: derived from
// its file name, so that SettleCapture finds it again.
func nextNodeName(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".qcow2")
}

// settleMigration cancels any outgoing migration, waits for it to end, and
// conts the guest if run and it is not running.
func settleMigration(ctx context.Context, m *monitor, run bool) error {
	var info migrationInfo
	if err := m.execute(ctx, "query-migrate", nil, &info); err != nil {
		return err
	}
	switch info.Status {
	case "", "none", "completed", "failed", "cancelled":
	default:
		if err := m.execute(ctx, "migrate_cancel", nil, nil); err != nil {
			return err
		}
		deadline := time.Now().Add(migrateTimeout)
		for {
			if err := m.execute(ctx, "query-migrate", nil, &info); err != nil {
				return err
			}
			if info.Status == "cancelled" || info.Status == "failed" || info.Status == "completed" || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if !run {
		return nil
	}
	var st qmpStatus
	if err := m.execute(ctx, "query-status", nil, &st); err != nil {
		return err
	}
	if st.Running {
		return nil
	}
	_, err := contAfterMigration(ctx, m)
	return err
}

// contAfterMigration sends cont, repeating it while QEMU has not finalized
// the migration that just completed; it returns how often QEMU refused.
func contAfterMigration(ctx context.Context, m *monitor) (retries int, err error) {
	deadline := time.Now().Add(contTimeout)
	for ; ; retries++ {
		err := m.execute(ctx, "cont", nil, nil)
		if err == nil || !strings.Contains(err.Error(), "not finalized") || time.Now().After(deadline) {
			return retries, err
		}
		time.Sleep(contRetry)
	}
}

// activeDisk returns the node name and file of the overlay the guest's disk
// writes now (the format node at the top of vda's chain).
func activeDisk(ctx context.Context, m *monitor) (node, file string, err error) {
	node, file, _, err = activeDiskChain(ctx, m)
	return node, file, err
}

// imageInfo is the part of query-block's image description that counts
// the layers under a disk.
type imageInfo struct {
	Backing *imageInfo `json:"backing-image"`
}

func (i *imageInfo) depth() int {
	n := 0
	for ; i != nil; i = i.Backing {
		n++
	}
	return n
}

// activeDiskChain is activeDisk and the number of qcow2 images in the
// disk's chain (the overlay itself included).
func activeDiskChain(ctx context.Context, m *monitor) (node, file string, chain int, err error) {
	var blocks []struct {
		QDev     string `json:"qdev"`
		Inserted *struct {
			NodeName string     `json:"node-name"`
			File     string     `json:"file"`
			Image    *imageInfo `json:"image"`
		} `json:"inserted"`
	}
	if err := m.execute(ctx, "query-block", nil, &blocks); err != nil {
		return "", "", 0, err
	}
	for _, b := range blocks {
		if b.Inserted != nil && strings.Contains(b.QDev, "/vda/") {
			return b.Inserted.NodeName, b.Inserted.File, b.Inserted.Image.depth(), nil
		}
	}
	return "", "", 0, fmt.Errorf("query-block: no disk vda: %w", errdefs.ErrInternal)
}
