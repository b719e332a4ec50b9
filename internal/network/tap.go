package network

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TAPFlags are the flags every TAP zeishd makes has, and every queue opened
// on it must repeat (vmm/qemu opens one per VM). Multi-queue lets two VMMs
// hold the same TAP for a moment: a fork launches the parent's continuation
// while the parent still runs.
const TAPFlags = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE

// ensureTAP makes l's persistent TAP with the gateway address on it, up; a
// TAP that exists (a restart) is only checked and completed.
func ensureTAP(nl *netlink.Handle, l Link) error {
	link, err := nl.LinkByName(l.TAP)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			return fmt.Errorf("tap %s: %w", l.TAP, err)
		}
		t := &netlink.Tuntap{
			LinkAttrs: netlink.LinkAttrs{Name: l.TAP},
			Mode:      netlink.TUNTAP_MODE_TAP,
			Flags:     netlink.TUNTAP_MULTI_QUEUE_DEFAULTS | netlink.TUNTAP_VNET_HDR,
			Queues:    1,
		}
		if err := nl.LinkAdd(t); err != nil {
			return fmt.Errorf("create tap %s: %w", l.TAP, err)
		}
		for _, f := range t.Fds {
			f.Close()
		}
		if link, err = nl.LinkByName(l.TAP); err != nil {
			return fmt.Errorf("tap %s: %w", l.TAP, err)
		}
	}
	// No IPv6 on the link: a guest would reach the host over link-local.
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+l.TAP+"/disable_ipv6", []byte("1"), 0o644)
	// Strict reverse-path filtering: the kernel drops a packet from the TAP
	// whose source it would not route back out of the TAP (another guest's
	// address, the internet's). The kernel applies the larger of this and
	// conf/all/rp_filter (2, loose, on many distributions), which zeishd
	// does not own: the sources chain (nft.go) is the check that always holds.
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+l.TAP+"/rp_filter", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("tap %s rp_filter: %w", l.TAP, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: l.Gateway.AsSlice(), Mask: net.CIDRMask(l.Bits, 32)}}
	if err := nl.AddrReplace(link, addr); err != nil {
		return fmt.Errorf("tap %s address %s: %w", l.TAP, l.Gateway, err)
	}
	if err := nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("tap %s up: %w", l.TAP, err)
	}
	return nil
}

// deleteTAP removes a TAP; one that is gone already is fine.
func deleteTAP(nl *netlink.Handle, name string) error {
	link, err := nl.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
	if err := nl.LinkDel(link); err != nil {
		return fmt.Errorf("delete tap %s: %w", name, err)
	}
	return nil
}

// listTAPs names every link zeishd owns.
func listTAPs(nl *netlink.Handle) ([]string, error) {
	links, err := nl.LinkList()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, tapPrefix) {
			out = append(out, l.Attrs().Name)
		}
	}
	return out, nil
}

// hostRoutes lists the IPv4 destinations the host routes (every table), and
// the networks of its addresses, so a default pool can avoid them.
func hostRoutes(nl *netlink.Handle) ([]netip.Prefix, error) {
	routes, err := nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		if p, ok := prefixOf(r.Dst); ok {
			out = append(out, p)
		}
	}
	addrs, err := nl.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok {
			out = append(out, p.Masked())
		}
	}
	return out, nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a, ones), true
}

// defaultUplink is the interface of the IPv4 default route ("" without one).
func defaultUplink(nl *netlink.Handle) (string, error) {
	routes, err := nl.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return "", err
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() && r.Dst.Mask != nil && isZeroMask(r.Dst.Mask) {
			l, err := nl.LinkByIndex(r.LinkIndex)
			if err != nil {
				return "", err
			}
			return l.Attrs().Name, nil
		}
	}
	return "", nil
}

func isZeroMask(m net.IPMask) bool {
	ones, _ := m.Size()
	return ones == 0
}
