package server

import (
	"fmt"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
)

// checkTemplateDisk refuses a sandbox disk smaller than its template's root
// file system here, at the edge: the guest cannot shrink an ext4 below what
// the template holds, so the boot would fail later (boot_failed).
func checkTemplateDisk(diskMiB int, tpl sandbox.Template) error {
	if diskMiB < tpl.DiskMiB {
		return fmt.Errorf("disk_mib %d is smaller than template %s's disk (%d MiB); ask for at least %d: %w",
			diskMiB, tpl.Name, tpl.DiskMiB, tpl.DiskMiB, errdefs.ErrDiskTooSmall)
	}
	return nil
}
