//go:build linux

package guest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Interface configuration by ioctl and rtnetlink, not by running ip: under TCG
// every process the agent starts costs tens of milliseconds, and this runs
// in the critical path of every boot, fork and restore.

// ifreqHW is struct ifreq holding a hardware address (struct sockaddr).
type ifreqHW struct {
	name   [unix.IFNAMSIZ]byte
	family uint16
	data   [14]byte
	_      [8]byte
}

// linkFlags reads dev's flags into a request that can set them again.
func linkFlags(fd int, dev string) (*unix.Ifreq, error) {
	ifr, err := unix.NewIfreq(dev)
	if err != nil {
		return nil, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return nil, fmt.Errorf("%s flags: %w", dev, err)
	}
	return ifr, nil
}

// setLinkDown takes dev down.
func setLinkDown(fd int, dev string) error {
	ifr, err := linkFlags(fd, dev)
	if err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() &^ unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s down: %w", dev, err)
	}
	return nil
}

// bringUp turns IPv6 off on dev and brings it up, unless it is up: then
// this was done before (a fork child's card is up as its parent left it),
// and setting the flags again is not free (virtio-net reprograms its
// receive filter through its control queue).
func bringUp(fd int, dev string) error {
	ifr, err := linkFlags(fd, dev)
	if err != nil {
		return err
	}
	if ifr.Uint16()&unix.IFF_UP != 0 {
		return nil
	}
	if err := disableIPv6(dev); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s up: %w", dev, err)
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
		if err := setLinkDown(fd, dev); err != nil {
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

// linkIndex is dev's interface index.
func linkIndex(fd int, dev string) (int32, error) {
	ifr, err := unix.NewIfreq(dev)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, fmt.Errorf("%s index: %w", dev, err)
	}
	return int32(ifr.Uint32()), nil
}

// readdress makes cidr dev's one IPv4 address and, when gw is set, the
// default route go via gw, by rtnetlink (rtnl.go). The new address goes on
// before the old ones come off: the link never loses its last address,
// which makes the kernel flush every route and neighbour of the link
// (SIOCSIFADDR and SIOCSIFNETMASK each did that, through a classful mask
// in between). Under TCG every kernel and agent path a fork child's
// reconfiguration takes runs for the first time in its QEMU and is
// translated first, so the fewer the better: one socket, three writes.
func readdress(r *rtnl, index int32, dev, cidr, gw string) error {
	var want netip.Prefix
	var have []netip.Prefix
	if cidr != "" {
		var err error
		if want, err = netip.ParsePrefix(cidr); err != nil || !want.Addr().Is4() {
			return fmt.Errorf("address %q: want an IPv4 CIDR", cidr)
		}
		if have, err = r.ipv4Addrs(index); err != nil {
			return fmt.Errorf("%s addresses: %w", dev, err)
		}
	}
	var route *nlMsg
	if gw != "" {
		ip, err := netip.ParseAddr(gw)
		if err != nil || !ip.Is4() {
			return fmt.Errorf("gateway %q: want an IPv4 address", gw)
		}
		route = defaultRouteMsg(index, ip)
	}
	var first, then []*nlMsg
	if cidr != "" {
		if slices.ContainsFunc(have, func(a netip.Prefix) bool { return a != want && a.Bits() == want.Bits() && a.Masked() == want.Masked() }) {
			// The new address shares an old one's subnet (a node without
			// networking gives every guest a /16 of 10.88/16): it is then
			// a secondary, which the kernel deletes together with the
			// primary unless told to promote it. (A fork child's new /30
			// is a subnet of its own: nothing to set.)
			first = append(first, promoteSecondariesMsg(index))
		}
		if !slices.Contains(have, want) {
			first = append(first, newAddrMsg(index, want))
		}
		for _, a := range have {
			if a != want {
				then = append(then, delAddrMsg(index, a))
			}
		}
	}
	if len(first) > 0 {
		// Apart from the removals: a failed add must leave the old
		// address in place.
		if err := r.do(first...); err != nil {
			return fmt.Errorf("%s address %s: %w", dev, cidr, err)
		}
	}
	if route != nil {
		// One replace, which also does for a fork child's route via its
		// parent's gateway.
		then = append(then, route)
	}
	if len(then) > 0 {
		if err := r.do(then...); err != nil {
			return fmt.Errorf("%s: %w", dev, err)
		}
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
