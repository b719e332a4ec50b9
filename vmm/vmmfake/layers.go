package vmmfake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/vmm"
)

// A fake disk file is text: its first line "overlay of <backing>" names the
// file it is backed by (Start, CaptureLive), and a merged layer's second
// line "merged <top>" the chain top it holds.

const overlayOf = "overlay of "

// DiskBacking reads the backing a fake disk file names.
func (d *Driver) DiskBacking(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("disk %s: %w", path, err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	backing, ok := strings.CutPrefix(first, overlayOf)
	if !ok {
		return "", nil // a base disk
	}
	return backing, nil
}

// Relink makes the fake disk file path name backing.
func (d *Driver) Relink(_ context.Context, path, backing string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("disk %s: %w", path, err)
	}
	first, rest, _ := strings.Cut(string(b), "\n")
	if !strings.HasPrefix(first, overlayOf) {
		return fmt.Errorf("relink %s: %w: a base disk has no backing", path, errdefs.ErrInvalidArgument)
	}
	out := overlayOf + backing
	if rest = strings.TrimSuffix(rest, "\n"); rest != "" {
		out += "\n" + rest
	}
	os.Chmod(path, 0o600)
	return writeFile(path, out)
}

// MergeLayers writes out as a layer over base that holds top's chain: base
// must be in it.
func (d *Driver) MergeLayers(_ context.Context, top, base, out string) error {
	if err := d.enter(OpMerge, top); err != nil {
		return err
	}
	if under, err := d.under(top, base); err != nil || !under {
		return errors.Join(err, fmt.Errorf("merge %s: %w: %s is not in its chain", top, errdefs.ErrInvalidArgument, base))
	}
	if _, err := os.Lstat(out); err == nil {
		return fmt.Errorf("merge %s: %w: %s exists", top, errdefs.ErrInvalidState, out)
	}
	return writeFile(out, overlayOf+base+"\nmerged "+top)
}

// Rebase makes h's overlay name layer as its backing; layer's own backing
// must be in the overlay's chain.
func (d *Driver) Rebase(_ context.Context, h *vmm.Handle, layer string) error {
	v, err := d.live(OpRebase, h)
	if err != nil {
		return err
	}
	base, err := d.DiskBacking(layer)
	if err != nil {
		return err
	}
	if under, err := d.under(h.Disk, base); err != nil || !under {
		return errors.Join(err, fmt.Errorf("rebase vm %q: %w: %s is not under its disk", h.Spec.ID, errdefs.ErrInvalidArgument, base))
	}
	d.mu.Lock()
	disk := v.h.Disk
	d.mu.Unlock()
	return writeFile(disk, overlayOf+layer)
}

// under reports whether base is in the backing chain below disk, as the
// QEMU driver's check does.
func (d *Driver) under(disk, base string) (bool, error) {
	for p := disk; p != ""; {
		next, err := d.DiskBacking(p)
		if err != nil {
			return false, err
		}
		if next == base {
			return true, nil
		}
		p = next
	}
	return false, nil
}
