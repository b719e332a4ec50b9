package imagefs

import (
	"fmt"
	"os"
	"syscall"
)

// Mount mounts an empty image folder on dir and returns the FUSE
// connection to Serve. allow_other: VMMs run as another user (and
// QEMU opens its RAM file before it drops to it, chroot or not); no
// default_permissions: the server decides, and refuses every write.
// Needs root.
func Mount(dir string) (*os.File, error) {
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("imagefs: %w", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other,max_read=%d", dev.Fd(), maxWrite)
	if err := syscall.Mount("zeish-images", dir, "fuse.zeish-images", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		dev.Close()
		return nil, fmt.Errorf("imagefs: mount on %s: %w", dir, err)
	}
	return dev, nil
}

// Unmount detaches the folder. Mappings VMs hold stay valid while some
// process still serves the connection; detach only once none maps it.
func Unmount(dir string) error {
	if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("imagefs: unmount %s: %w", dir, err)
	}
	return nil
}
