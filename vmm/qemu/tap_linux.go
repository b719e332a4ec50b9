package qemu

import (
	"fmt"
	"net"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tapFlags must equal the flags the TAP was made with (internal/network
// makes them multi-queue, with virtio-net headers).
const tapFlags = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE

// openTAPQueue attaches a new queue to an existing TAP and returns it, for
// QEMU to inherit. It never creates a TAP: a name that does not exist fails.
func openTAPQueue(name string) (*os.File, error) {
	// TUNSETIFF on a name that does not exist would make a new TAP, one that
	// goes with QEMU and has no address or firewall: refuse that.
	if _, err := net.InterfaceByName(name); err != nil {
		return nil, fmt.Errorf("tap %s: %w", name, err)
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	var req struct {
		name  [unix.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(req.name[:], name)
	req.flags = tapFlags
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req))); errno != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("attach to tap %s: %w", name, errno)
	}
	return os.NewFile(uintptr(fd), "tap:"+name), nil
}
