package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/zeish/zeish/vmm"
)

// SettleCapture makes h whole after a CaptureLive into dir that was cut short.
func (d *Driver) SettleCapture(ctx context.Context, h *vmm.Handle, dir string, swap vmm.DiskSwap, run bool) error {
	rh := receiverHandle(h, dir)
	pid, _ := readPIDFile(pidFile(rh))
	kerr := killTagged(idOf(rh), pid)
	if d.confine != nil {
		d.confine.leave(cgroupID(rh))
	}
	// A capture by private pages leaves its part-made RAM file and its
	// device state in the source's folder; a migration, its receiver.
	removeFiles(d.imageMemFile(dir), partMemFile(d.imageMemFile(dir)), filepath.Join(dir, stateName),
		filepath.Join(h.Spec.Dir, deltaStateName))
	os.RemoveAll(rh.Spec.Dir)
	tmpNext := sameFileIn(h.Spec.Dir, nextDiskPrefix+"*.qcow2", swap.Next)
	var errs []error
	if kerr != nil {
		errs = append(errs, kerr)
	}
	if d.Alive(h) {
		err := d.withMonitor(ctx, h.QMPSocket, func(m *monitor) error {
			if err := settleMigration(ctx, m, run); err != nil {
				return err
			}
			// Back to one socket per save, as CaptureLive leaves it.
			off := []capability{{"pause-before-switchover", false}}
			if d.liveMultifd() {
				off = append(off, capability{"multifd", false})
			}
			if err := setCapabilities(ctx, m, off...); err != nil {
				return err
			}
			_, file, err := activeDisk(ctx, m)
			if err != nil {
				return err
			}
			if tmpNext != "" && (file == d.guestPath(h, tmpNext) || file == tmpNext) || file == swap.Next {
				h.Disk = swap.Next
			} else if tmpNext != "" {
				// Opened ahead but never switched to: close it.
				_ = m.execute(ctx, "blockdev-del", map[string]any{"node-name": nextNodeName(tmpNext)}, nil)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	if h.Disk != swap.Next {
		removeFiles(tmpNext, swap.Next, swap.Frozen)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("settle capture of vm %q: %w", h.Spec.ID, err)
	}
	return nil
}

// sameFileIn returns the file in dir matching pattern that is path under
// another name ("" if none).
func sameFileIn(dir, pattern, path string) string {
	want, err := os.Stat(path)
	if err != nil {
		return ""
	}
	names, _ := filepath.Glob(filepath.Join(dir, pattern))
	for _, n := range names {
		if fi, err := os.Stat(n); err == nil && os.SameFile(fi, want) {
			return n
		}
	}
	return ""
}
