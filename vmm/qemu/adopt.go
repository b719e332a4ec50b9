package qemu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/vmm"
)

// Adopt hands a ready VM (started From an image) to spec. The
// VMM is chrooted into its folder, so renaming the folder to spec.Dir moves
// its sockets, pidfile and console log without QEMU noticing; its disk is
// an open file, linked to spec.Disk. What cannot move is the process's
// command line and cgroup: the handle keeps them as its Origin.
func (d *Driver) Adopt(ctx context.Context, h *vmm.Handle, spec vmm.Spec) (_ *vmm.Handle, err error) {
	began := time.Now()
	defer func() {
		if err != nil {
			err = fmt.Errorf("adopt vm %q as %q: %w", h.Spec.ID, spec.ID, err)
		}
	}()
	if h.Spec.From == nil || h.Spec.Deferred || h.MemShared {
		return nil, fmt.Errorf("%w: only a VM started from an image can be adopted", errdefs.ErrInvalidState)
	}
	if spec, err = validate(spec); err != nil {
		return nil, err
	}
	if err := sameMachine(h.Spec, spec); err != nil {
		return nil, err
	}
	unlock, err := d.lockQMP(ctx, h.QMPSocket)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if !isOurs(h.PID, idOf(h)) {
		return nil, fmt.Errorf("%w: qemu is not running", errdefs.ErrUnavailable)
	}
	// An empty spec.Dir goes (os.Rename never replaces a directory); one
	// with files in it is refused, never overwritten.
	if err := os.Remove(spec.Dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s: %w", errdefs.ErrInvalidArgument, spec.Dir, err)
	}
	if err := os.Rename(h.Spec.Dir, spec.Dir); err != nil {
		return nil, fmt.Errorf("move the VM's folder: %w", err)
	}
	if h.Disk != spec.Disk {
		if err := os.Link(h.Disk, spec.Disk); err != nil {
			return nil, errors.Join(fmt.Errorf("link the VM's disk: %w", err), os.Rename(spec.Dir, h.Spec.Dir))
		}
		os.Remove(h.Disk)
	}
	d.forgetQMP(h.QMPSocket)
	nh := *h
	if nh.Origin == nil {
		nh.Origin = &vmm.Origin{ID: h.Spec.ID, Dir: h.Spec.Dir, QMPSocket: h.QMPSocket}
	}
	spec.From = h.Spec.From
	nh.Spec = spec
	nh.QMPSocket = filepath.Join(spec.Dir, qmpName)
	nh.AgentSocket = filepath.Join(spec.Dir, agentName)
	nh.Disk = spec.Disk
	d.log.Info("vm adopted", logKeySandbox, spec.ID, logKeyPID, h.PID, "ready_as", h.Spec.ID,
		"ms", time.Since(began).Milliseconds())
	return &nh, nil
}

// sameMachine refuses to adopt a VM for a spec that asks for another
// machine or another image: the guest would not be what spec says.
func sameMachine(had, want vmm.Spec) error {
	nicOf := func(s vmm.Spec) string {
		switch {
		case s.NoNIC:
			return "none"
		case s.NIC != nil:
			return "tap " + s.NIC.TAP
		}
		return "user"
	}
	switch {
	case want.From == nil || want.From.Dir != had.From.Dir:
		return fmt.Errorf("%w: the VM runs image %s, not the one asked for", errdefs.ErrInvalidArgument, had.From.Dir)
	case want.VCPUs != had.VCPUs || want.MemoryMiB != had.MemoryMiB || want.DiskMiB != had.DiskMiB:
		return fmt.Errorf("%w: the VM has %d vCPU, %d MiB, %d MiB disk; asked for %d, %d, %d", errdefs.ErrInvalidArgument,
			had.VCPUs, had.MemoryMiB, had.DiskMiB, want.VCPUs, want.MemoryMiB, want.DiskMiB)
	case nicOf(want) != nicOf(had):
		return fmt.Errorf("%w: the VM's network card is %s, asked for %s", errdefs.ErrInvalidArgument, nicOf(had), nicOf(want))
	}
	return nil
}
