package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/vmm"
)

// How fork, snapshot and stop use QEMU migration (docs/qemu.md, "Forking a
// running VM"):
//
//   - A VM owns its RAM as a memory-backend-file with share=on. Capturing it
//     (Capture, !full) stops it, migrates with x-ignore-shared so only device
//     state (~400 KB) is written, and quits: the RAM file, which nothing
//     writes any more, becomes the image's memory. Cost is flat in RAM size.
//   - VMs started from an image map that file share=off: copy-on-write, so an
//     idle clone owns almost no memory. The same command line plus
//     -incoming defer, x-ignore-shared and migrate-incoming of the state file.
//   - Nothing may ever write to an image's RAM file: a private mapping sees
//     later writes to pages it has not copied yet. Hence "capture", never
//     "save and carry on", and the parent's continuation is one more clone.
//   - A clone's RAM is not its own, so saving device state alone cannot
//     capture it. CaptureLive (live.go) copies it into a never-started
//     receiver while it runs. Promote, the older way kept for paused VMs and
//     for comparison, moves it with the guest stopped for the copy into a VM
//     that owns a fresh shared file (the pause grows with touched memory).
//     An early live promotion whose destination went on running produced
//     guests that crashed under TCG; a receiver that never runs (-S) has
//     been sound in every test since.
//   - A full capture (stop, suspend to disk) writes all RAM into the state
//     file; starting from it loads everything into a fresh shared file.

const (
	stateName       = "state.bin"
	migrateSockName = "migrate.sock" // a VMM's incoming migration listens here
	saveSockName    = "save.sock"    // zeishd takes a VMM's outgoing state here
	relaySockName   = "relay.sock"   // zeishd relays a promotion here (VMMs cannot see each other's folders)
	// migrateTimeout bounds one migration; full ones move all touched RAM.
	migrateTimeout = 10 * time.Minute
	// Migration's default 128 MiB/s cap is for networks; these copies are local.
	localBandwidth = 64 << 30
)

func migrateSocket(h *vmm.Handle) string { return filepath.Join(h.Spec.Dir, migrateSockName) }

type migrationInfo struct {
	Status   string `json:"status"` // "active", "completed", "failed", …
	Error    string `json:"error-desc"`
	Downtime int64  `json:"downtime"` // ms, once completed
	RAM      struct {
		Transferred int64 `json:"transferred"`
	} `json:"ram"`
}

// waitMigration polls query-migrate until the migration ends.
// Polls are fine-grained at first: a fork's pause waits on them, and the
// device-state save and load take tens of milliseconds.
const pollDelay = time.Millisecond

func nextPoll(began time.Time) time.Duration {
	if time.Since(began) < 200*time.Millisecond {
		return pollDelay
	}
	return 20 * time.Millisecond
}

func waitMigration(ctx context.Context, m *monitor) (migrationInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	began, delay := time.Now(), pollDelay
	for {
		var info migrationInfo
		if err := m.execute(ctx, "query-migrate", nil, &info); err != nil {
			return info, err
		}
		switch info.Status {
		case "completed":
			return info, nil
		case "failed", "cancelled":
			return info, fmt.Errorf("migration %s: %s: %w", info.Status, info.Error, errdefs.ErrInternal)
		}
		select {
		case <-ctx.Done():
			return info, fmt.Errorf("migration still %s: %w", info.Status, ctx.Err())
		case <-time.After(delay):
		}
		delay = nextPoll(began)
	}
}

func setIgnoreShared(ctx context.Context, m *monitor, on bool) error {
	return m.execute(ctx, "migrate-set-capabilities", map[string]any{
		"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": on}},
	}, nil)
}

// loadImage feeds img's state to a VM launched with -incoming defer and, if
// run, lets the guest continue.
func (d *Driver) loadImage(ctx context.Context, h *vmm.Handle, img *vmm.Image, run bool) error {
	return d.withMonitor(ctx, h.QMPSocket, func(m *monitor) error {
		if err := setIgnoreShared(ctx, m, img.MemFile != ""); err != nil {
			return err
		}
		sock := migrateSocket(h)
		os.Remove(sock)
		if err := m.execute(ctx, "migrate-incoming", map[string]any{"uri": "unix:" + d.guestPath(h, sock)}, nil); err != nil {
			return err
		}
		fed := make(chan error, 1)
		go func() { fed <- feedState(ctx, sock, img.StateFile) }()
		if err := waitIncoming(ctx, m); err != nil {
			return err
		}
		if err := <-fed; err != nil {
			return err
		}
		os.Remove(sock)
		if img.MemFile == "" {
			d.punchLoadedRAM(h)
		}
		if run {
			return m.execute(ctx, "cont", nil, nil)
		}
		return nil
	})
}

// waitIncoming waits until an incoming migration has loaded: the VM leaves
// "inmigrate" for "paused" (state saved from a stopped guest) or "running".
func waitIncoming(ctx context.Context, m *monitor) error {
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	began, delay := time.Now(), pollDelay
	for {
		var st qmpStatus
		if err := m.execute(ctx, "query-status", nil, &st); err != nil {
			return err
		}
		switch st.Status {
		case "paused", "running":
			return nil
		case "inmigrate", "prelaunch", "finish-migrate", "restore-vm":
		default:
			return fmt.Errorf("incoming migration ended in state %q: %w", st.Status, errdefs.ErrInternal)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("incoming migration still %s: %w", st.Status, ctx.Err())
		case <-time.After(delay):
		}
		delay = nextPoll(began)
	}
}

// Load completes a VM launched Deferred with the image that is now ready.
func (d *Driver) Load(ctx context.Context, h *vmm.Handle, img *vmm.Image, run bool) error {
	if !h.Spec.Deferred || h.Spec.From == nil {
		return fmt.Errorf("load vm %q: it was not started deferred: %w", h.Spec.ID, errdefs.ErrInvalidState)
	}
	if img.MemFile != "" {
		h.MemFile = img.MemFile // the file it mapped at launch, renamed by the capture
	}
	began := time.Now()
	if err := d.loadImage(ctx, h, img, run); err != nil {
		return fmt.Errorf("load vm %q from %s: %w", h.Spec.ID, img.Dir, err)
	}
	h.Spec.From, h.Spec.Deferred = img, false
	d.log.Info("vm loaded", logKeySandbox, h.Spec.ID, "ms", time.Since(began).Milliseconds())
	// The image's RAM is immutable since the capture; read it for zero
	// pages only now that the continuation runs, not during the pause.
	if img.MemFile != "" {
		d.sparsifyLater(img.MemFile)
	}
	return nil
}

// Capture stops h's guest for good and saves it into dir as an image.
func (d *Driver) Capture(ctx context.Context, h *vmm.Handle, dir string, full bool) (_ *vmm.Image, stoppedAt time.Time, err error) {
	if !full && !h.MemShared {
		return nil, time.Time{}, fmt.Errorf("capture vm %q: its RAM is an image's, not its own (promote it first): %w", h.Spec.ID, errdefs.ErrInvalidState)
	}
	if !d.Alive(h) {
		return nil, time.Time{}, fmt.Errorf("capture vm %q: %w: qemu is not running", h.Spec.ID, errdefs.ErrUnavailable)
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, time.Time{}, err
	}
	img := &vmm.Image{Dir: dir, StateFile: filepath.Join(dir, stateName), MemoryMiB: h.Spec.MemoryMiB}
	var wasRunning bool
	var migrated time.Time
	err = d.withMonitor(ctx, h.QMPSocket, func(m *monitor) error {
		var st qmpStatus
		if err := m.execute(ctx, "query-status", nil, &st); err != nil {
			return err
		}
		wasRunning = st.Running
		// Settings first: they do not touch the running guest, and every
		// round trip after stop is pause.
		if err := setIgnoreShared(ctx, m, !full); err != nil {
			return err
		}
		if err := m.execute(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": localBandwidth}, nil); err != nil {
			return err
		}
		sock := filepath.Join(h.Spec.Dir, saveSockName)
		sink, err := newStateSink(sock, img.StateFile)
		if err != nil {
			return err
		}
		if err := d.confine.own(sock); err != nil {
			sink.close()
			return err
		}
		defer sink.close()
		if err := m.execute(ctx, "stop", nil, nil); err != nil {
			return err
		}
		stoppedAt = time.Now()
		err = func() error {
			if err := m.execute(ctx, "migrate", map[string]any{"uri": "unix:" + d.guestPath(h, sock)}, nil); err != nil {
				return err
			}
			if _, err := waitMigration(ctx, m); err != nil {
				return err
			}
			err := sink.wait(ctx)
			migrated = time.Now()
			return err
		}()
		if err != nil {
			// The guest is intact: let it carry on as it was.
			os.Remove(img.StateFile)
			if wasRunning {
				if cerr := m.execute(context.WithoutCancel(ctx), "cont", nil, nil); cerr != nil {
					d.log.Error("resume after failed capture", logKeySandbox, h.Spec.ID, "err", cerr)
				}
			}
			return err
		}
		// The reply may not arrive before QEMU closes the socket.
		_ = m.execute(ctx, "quit", nil, nil)
		return nil
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("capture vm %q: %w", h.Spec.ID, err)
	}
	d.reap(h)
	gone := time.Now()
	if full {
		if h.MemShared {
			removeFiles(h.MemFile)
		}
	} else {
		// The RAM file now belongs to the image.
		img.MemFile = d.imageMemFile(dir)
		if err := os.Rename(h.MemFile, img.MemFile); err != nil {
			return nil, time.Time{}, fmt.Errorf("capture vm %q: keep its RAM: %w", h.Spec.ID, err)
		}
		if err := sealImageFile(img.MemFile); err != nil {
			return nil, time.Time{}, fmt.Errorf("capture vm %q: %w", h.Spec.ID, err)
		}
	}
	d.log.Info("vm captured", logKeySandbox, h.Spec.ID, "full", full, "image", dir,
		"ms", time.Since(stoppedAt).Milliseconds(), "save_ms", migrated.Sub(stoppedAt).Milliseconds(),
		"exit_ms", gone.Sub(migrated).Milliseconds())
	return img, stoppedAt, nil
}

// reap waits for h's QEMU to exit after quit (killing it if it lingers) and
// removes its runtime files, but neither its disk nor its RAM file.
func (d *Driver) reap(h *vmm.Handle) {
	id := idOf(h)
	if !waitGone(h.PID, id, quitGrace) {
		d.log.Warn("qemu lingered after quit; killing", logKeySandbox, h.Spec.ID, logKeyPID, h.PID)
		_ = killTagged(id, h.PID)
	}
	d.forgetQMP(h.QMPSocket)
	if h.Confined && d.confine != nil {
		d.confine.leave(cgroupID(h))
	}
	removeFiles(h.QMPSocket, h.AgentSocket, pidFile(h), d.ConsoleLog(h), migrateSocket(h),
		filepath.Join(h.Spec.Dir, saveSockName), filepath.Join(h.Spec.Dir, relaySockName))
	d.releaseSource(h)
}

// Promote migrates h's guest, stopped, into a new VM in dir that owns its
// RAM, and lets it run on there if it was running.
func (d *Driver) Promote(ctx context.Context, h *vmm.Handle, dir string) (_ *vmm.Handle, downtime time.Duration, err error) {
	if !d.Alive(h) {
		return nil, 0, fmt.Errorf("promote vm %q: %w: qemu is not running", h.Spec.ID, errdefs.ErrUnavailable)
	}
	spec := h.Spec
	spec.Dir, spec.From, spec.BaseDisk, spec.Paused, spec.Disk = dir, nil, "", false, h.Disk
	if spec, err = validate(spec); err != nil {
		return nil, 0, err
	}
	var undo rollback.Stack
	defer d.rollbackOnError(ctx, &undo, spec.ID, &err)
	nh, err := d.launchVM(ctx, &undo, spec, d.newMemFile(spec.ID), true, true, false)
	if err != nil {
		return nil, 0, err
	}
	if err := d.withMonitor(ctx, nh.QMPSocket, func(m *monitor) error {
		if err := setIgnoreShared(ctx, m, false); err != nil {
			return err
		}
		return m.execute(ctx, "migrate-incoming", map[string]any{"uri": "unix:" + d.guestPath(nh, migrateSocket(nh))}, nil)
	}); err != nil {
		return nil, 0, err
	}
	// Each VMM sees only its own folder: the source sends to a socket in
	// its folder, which zeishd relays to the destination's.
	relaySock := filepath.Join(h.Spec.Dir, relaySockName)
	relay, err := newRelay(relaySock, migrateSocket(nh))
	if err != nil {
		return nil, 0, err
	}
	defer relay.close()
	if err := d.confine.own(relaySock); err != nil {
		return nil, 0, err
	}
	uri := "unix:" + d.guestPath(h, relaySock)
	var info migrationInfo
	var wasRunning bool
	var stoppedAt time.Time
	if err := d.withMonitor(ctx, h.QMPSocket, func(m *monitor) error {
		var st qmpStatus
		if err := m.execute(ctx, "query-status", nil, &st); err != nil {
			return err
		}
		wasRunning = st.Running
		if err := setIgnoreShared(ctx, m, false); err != nil {
			return err
		}
		if err := m.execute(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": localBandwidth}, nil); err != nil {
			return err
		}
		if err := m.execute(ctx, "stop", nil, nil); err != nil {
			return err
		}
		stoppedAt = time.Now()
		err := m.execute(ctx, "migrate", map[string]any{"uri": uri}, nil)
		if err == nil {
			info, err = waitMigration(ctx, m)
		}
		if err != nil {
			// The source is intact: let it carry on as it was.
			m.execute(context.WithoutCancel(ctx), "migrate_cancel", nil, nil)
			if wasRunning {
				m.execute(context.WithoutCancel(ctx), "cont", nil, nil)
			}
			return err
		}
		return nil
	}); err != nil {
		return nil, 0, err
	}
	if err := d.withMonitor(ctx, nh.QMPSocket, func(m *monitor) error {
		if err := waitIncoming(ctx, m); err != nil {
			return err
		}
		if wasRunning {
			return m.execute(ctx, "cont", nil, nil)
		}
		return nil
	}); err != nil {
		return nil, 0, err
	}
	downtime = time.Since(stoppedAt)
	undo.Release()
	// The source has handed over; it only has to go.
	_ = d.withMonitor(ctx, h.QMPSocket, func(m *monitor) error { return m.execute(ctx, "quit", nil, nil) })
	d.reap(h)
	if h.MemShared {
		removeFiles(h.MemFile)
	} else {
		d.sparsifyLater(h.MemFile) // the source read its image's every page
	}
	d.log.Info("vm promoted", logKeySandbox, h.Spec.ID, "downtime_ms", downtime.Milliseconds(),
		"ram_mb", info.RAM.Transferred>>20)
	return nh, downtime, nil
}
