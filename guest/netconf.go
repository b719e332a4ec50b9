//go:build linux

package guest

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Interface configuration by ioctl, not by running ip: under TCG every
// process the agent starts costs tens of milliseconds, and this runs in the
// critical path of every boot, fork and restore.

// ifreqHW is struct ifreq holding a hardware address (struct sockaddr).
type ifreqHW struct {
	name   [unix.IFNAMSIZ]byte
	family uint16
	data   [14]byte
	_      [8]byte
}

func ifconfigSocket() (int, error) {
	return unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
}

// setLinkUp brings dev up or down.
func setLinkUp(fd int, dev string, up bool) error {
	ifr, err := unix.NewIfreq(dev)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s flags: %w", dev, err)
	}
	flags := ifr.Uint16()
	if up {
		flags |= unix.IFF_UP
	} else {
		flags &^= unix.IFF_UP
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s up=%v: %w", dev, up, err)
	}
	return nil
}

// changeMAC gives dev the hardware address mac. A fork child's card still
// has its parent's. virtio-net takes a new address on a running link; taking
// the link down instead costs a fork ~100 ms under TCG (the driver frees and
// refills its receive ring) and flushes the routes through it, so down/up is
// only the fallback for a driver that refuses (EBUSY).
func changeMAC(fd int, dev, mac string) error {
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return fmt.Errorf("mac %q: %w", mac, err)
	}
	req := ifreqHW{family: unix.ARPHRD_ETHER}
	copy(req.name[:], dev)
	if err := hwaddrIoctl(fd, unix.SIOCGIFHWADDR, &req); err != nil {
		return fmt.Errorf("%s mac: %w", dev, err)
	}
	if net.HardwareAddr(req.data[:6]).String() == hw.String() {
		return nil
	}
	req.family = unix.ARPHRD_ETHER
	copy(req.data[:], hw)
	err = hwaddrIoctl(fd, unix.SIOCSIFHWADDR, &req)
	if err == unix.EBUSY {
		if err := setLinkUp(fd, dev, false); err != nil {
			return err
		}
		err = hwaddrIoctl(fd, unix.SIOCSIFHWADDR, &req)
	}
	if err != nil {
		return fmt.Errorf("%s mac %s: %w", dev, mac, err)
	}
	return nil
}

func hwaddrIoctl(fd int, req uint, r *ifreqHW) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(r))); errno != 0 {
		return errno
	}
	return nil
}

// setIPv4 replaces dev's IPv4 address and netmask with cidr's.
func setIPv4(fd int, dev, cidr string) error {
	ip, ipnet, err := net.ParseCIDR(cidr)
	if err != nil || ip.To4() == nil {
		return fmt.Errorf("address %q: want an IPv4 CIDR", cidr)
	}
	for _, step := range []struct {
		req  uint
		addr []byte
		what string
	}{{unix.SIOCSIFADDR, ip.To4(), "address"}, {unix.SIOCSIFNETMASK, net.IP(ipnet.Mask).To4(), "netmask"}} {
		ifr, err := unix.NewIfreq(dev)
		if err != nil {
			return err
		}
		if err := ifr.SetInet4Addr(step.addr); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, step.req, ifr); err != nil {
			return fmt.Errorf("%s %s %s: %w", dev, step.what, cidr, err)
		}
	}
	return nil
}

// rtentry is struct rtentry (linux/route.h) on 64-bit Linux, for SIOCADDRT
// and SIOCDELRT: a default route costs two ioctls instead of an ip process.
type rtentry struct {
	_       uint64
	dst     unix.RawSockaddrInet4
	gateway unix.RawSockaddrInet4
	genmask unix.RawSockaddrInet4
	flags   uint16
	_       int16
	_       [4]byte
	_       uint64
	_       uintptr
	metric  int16
	_       [6]byte
	dev     *byte
	_       uint64
	_       uint64
	_       uint16
	_       [6]byte
}

// setDefaultRoute replaces the IPv4 default route with one via gw on dev
// (a fork child still has its parent's, via the parent's gateway).
func setDefaultRoute(fd int, dev, gw string) error {
	ip, err := netip.ParseAddr(gw)
	if err != nil || !ip.Is4() {
		return fmt.Errorf("gateway %q: want an IPv4 address", gw)
	}
	name, err := unix.BytePtrFromString(dev)
	if err != nil {
		return err
	}
	rt := rtentry{flags: unix.RTF_UP | unix.RTF_GATEWAY, dev: name}
	rt.dst.Family, rt.genmask.Family, rt.gateway.Family = unix.AF_INET, unix.AF_INET, unix.AF_INET
	rt.gateway.Addr = ip.As4()
	// Remove every default route there is (ESRCH: none left).
	for i := 0; i < 8; i++ {
		del := rtentry{dev: nil}
		del.dst.Family, del.genmask.Family = unix.AF_INET, unix.AF_INET
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCDELRT, uintptr(unsafe.Pointer(&del))); errno != 0 {
			break
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCADDRT, uintptr(unsafe.Pointer(&rt))); errno != 0 {
		return fmt.Errorf("default route via %s dev %s: %w", gw, dev, errno)
	}
	runtime.KeepAlive(name)
	return nil
}
