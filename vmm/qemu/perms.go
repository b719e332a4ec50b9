package qemu

import (
	"fmt"
	"os"
	"syscall"
)

// Guest RAM is a tenant's memory: every file holding it is 0600, in
// folders that are 0700. QEMU would create a RAM file with the mode its
// umask leaves (0644 under the usual 022), readable by every local user, so
// the driver makes the file itself before QEMU opens it.

// createMemFile makes a new, empty RAM file for a VM that owns its RAM:
// 0600 and owned by the VM user when VMMs are confined (QEMU sizes it).
// O_EXCL and O_NOFOLLOW: a file or symlink planted under the name in the
// world-writable /dev/shm is refused, never followed.
func (d *Driver) createMemFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("ram file: %w", err)
	}
	defer f.Close()
	if d.confine != nil {
		if err := f.Chown(d.confine.uid, d.confine.gid); err != nil {
			os.Remove(path)
			return fmt.Errorf("ram file: %w", err)
		}
	}
	return nil
}

// sealImageFile makes a file that became part of an image zeishd's alone
// (0600, owned by zeishd's user): VMs map an image's RAM privately, and no
// VM user may write to a file other VMs map.
func sealImageFile(path string) error {
	if err := os.Chown(path, os.Geteuid(), os.Getegid()); err != nil {
		return fmt.Errorf("seal %s: %w", path, err)
	}
	return os.Chmod(path, 0o600)
}
