//go:build linux

package guest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Interface configuration by ioctl and netlink, not by running ip: under TCG
// every process the agent starts costs tens of milliseconds, and this runs
// in the critical path of every boot, fork and restore.

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

// replaceIPv4 makes cidr dev's one IPv4 address. The new address goes on
// before the old ones come off, by netlink: the link never loses its last
// address, which makes the kernel flush every route and neighbour of the
// link (SIOCSIFADDR and SIOCSIFNETMASK each did that, through a classful
// mask in between). Under TCG every kernel path a fork child's
// reconfiguration takes runs for the first time in its QEMU and is
// translated first, so the fewer the better.
func replaceIPv4(h *netlink.Handle, link netlink.Link, cidr string) error {
	want, err := netlink.ParseIPNet(cidr)
	if err != nil || want.IP.To4() == nil {
		return fmt.Errorf("address %q: want an IPv4 CIDR", cidr)
	}
	have, err := h.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("%s addresses: %w", link.Attrs().Name, err)
	}
	found := false
	for _, a := range have {
		if a.IPNet.String() == want.String() {
			found = true
		}
	}
	if !found {
		if err := h.AddrAdd(link, &netlink.Addr{IPNet: want}); err != nil {
			return fmt.Errorf("%s address %s: %w", link.Attrs().Name, cidr, err)
		}
	}
	if len(have) > 0 && !found {
		// The new address may share the old one's subnet (a node without
		// networking gives every guest a /16 of 10.88/16): it is then a
		// secondary, which the kernel deletes together with the primary
		// unless told to promote it.
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+link.Attrs().Name+"/promote_secondaries", []byte("1"), 0o644); err != nil {
			return fmt.Errorf("%s: promote secondaries: %w", link.Attrs().Name, err)
		}
	}
	for _, a := range have {
		if a.IPNet.String() == want.String() {
			continue
		}
		if err := h.AddrDel(link, &a); err != nil {
			return fmt.Errorf("%s remove address %s: %w", link.Attrs().Name, a.IPNet, err)
		}
	}
	return nil
}

// replaceDefaultRoute makes the IPv4 default route go via gw on link: one
// replace, which also does for a fork child's route via its parent's
// gateway.
func replaceDefaultRoute(h *netlink.Handle, link netlink.Link, gw string) error {
	ip, err := netip.ParseAddr(gw)
	if err != nil || !ip.Is4() {
		return fmt.Errorf("gateway %q: want an IPv4 address", gw)
	}
	r := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.IP(ip.AsSlice()), Family: netlink.FAMILY_V4}
	if err := h.RouteReplace(r); err != nil {
		return fmt.Errorf("default route via %s dev %s: %w", gw, link.Attrs().Name, err)
	}
	return nil
}

// disableIPv6 turns IPv6 off on dev before it comes up: the node routes
// IPv4 only (its TAP has no IPv6, and the firewall drops IPv6 from
// guests), so a link-local address, its duplicate detection, router
// solicitations and multicast-listener reports are guest work for nothing,
// on every boot, and every fork's announcement repeats some of it.
// IPv6 sockets (and ::1 on lo) keep working.
func disableIPv6(dev string) error {
	err := os.WriteFile("/proc/sys/net/ipv6/conf/"+dev+"/disable_ipv6", []byte("1"), 0o644)
	if errors.Is(err, os.ErrNotExist) {
		return nil // a kernel without IPv6
	}
	if err != nil {
		return fmt.Errorf("%s: disable ipv6: %w", dev, err)
	}
	return nil
}
