//go:build linux

package guest

import (
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/zeish/zeish/internal/testskip"
)

// A fork child's card gets its new MAC without the link going down: the
// routes through it survive (a down/up flushes them, and costs a fork
// ~100 ms under TCG), and the address, gateway and MAC are the new ones.
func TestSetNetworkKeepsTheLinkUp(t *testing.T) {
	if os.Geteuid() != 0 {
		testskip.Skip(t, "needs root for a network namespace")
	}
	inVethNetns(t, []string{"peer0", "eth0"}, func(link netlink.Link) {
		var nc netconf
		defer nc.close()
		extra, _ := netlink.ParseIPNet("198.19.99.0/24")
		if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: mustNet(t, "198.18.0.2/30")}); err != nil {
			t.Errorf("address: %v", err)
			return
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: extra}); err != nil {
			t.Errorf("route: %v", err)
			return
		}
		// The MAC alone first: a route through the link survives only if the
		// link never went down. (Replacing the address flushes routes anyway.)
		for _, mac := range []string{"02:00:00:00:00:02", "02:00:00:00:00:02"} { // a change, then the same again
			if err := nc.set(Network{Interface: "eth0", MAC: mac}); err != nil {
				t.Errorf("set: %v", err)
				return
			}
		}
		if !hasRoute(t, extra.String()) {
			t.Errorf("the route to %s is gone: the link went down", extra)
		}
		if err := nc.set(Network{Interface: "eth0", MAC: "02:00:00:00:00:02", Address: "198.18.0.6/30", Gateway: "198.18.0.5"}); err != nil {
			t.Errorf("set: %v", err)
			return
		}
		got, err := netlink.LinkByName("eth0")
		if err != nil {
			t.Errorf("link: %v", err)
			return
		}
		if got.Attrs().HardwareAddr.String() != "02:00:00:00:00:02" || got.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("link %s up=%v, want the new MAC and up", got.Attrs().HardwareAddr, got.Attrs().Flags&net.FlagUp != 0)
		}
		if !hasRoute(t, "0.0.0.0/0 via 198.18.0.5") {
			t.Error("no default route via the gateway")
		}
		addrs, _ := netlink.AddrList(got, netlink.FAMILY_V4)
		if len(addrs) != 1 || addrs[0].IPNet.String() != "198.18.0.6/30" {
			t.Errorf("addresses %v, want 198.18.0.6/30 alone", addrs)
		}
	})
}

// A fork child's new address goes on before its parent's comes off, so
// the link is never without an address: the kernel then keeps the link's
// other routes (SIOCSIFADDR flushed them, twice), and the default route is
// replaced in one step. IPv6 is off on the card: the node routes none.
func TestSetNetworkReaddressesInPlace(t *testing.T) {
	if os.Geteuid() != 0 {
		testskip.Skip(t, "needs root for a network namespace")
	}
	inVethNetns(t, []string{"peer0"}, func(link netlink.Link) {
		var nc netconf
		defer nc.close()
		// The parent's configuration, as the child resumes with it.
		parent := Network{Interface: "eth0", MAC: "02:00:00:00:00:01", Address: "198.18.0.2/30", Gateway: "198.18.0.1"}
		if err := nc.set(parent); err != nil {
			t.Errorf("set parent: %v", err)
			return
		}
		extra := mustNet(t, "198.19.99.0/24")
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: extra}); err != nil {
			t.Errorf("route: %v", err)
			return
		}
		child := Network{Interface: "eth0", MAC: "02:00:00:00:00:02", Address: "198.18.0.6/30", Gateway: "198.18.0.5"}
		for range 2 { // a change, then the same again
			if err := nc.set(child); err != nil {
				t.Errorf("set child: %v", err)
				return
			}
		}
		if !hasRoute(t, extra.String()) {
			t.Errorf("the route to %s is gone: the link lost its last address", extra)
		}
		got, err := netlink.LinkByName("eth0")
		if err != nil {
			t.Errorf("link: %v", err)
			return
		}
		addrs, _ := netlink.AddrList(got, netlink.FAMILY_V4)
		if len(addrs) != 1 || addrs[0].IPNet.String() != "198.18.0.6/30" {
			t.Errorf("addresses %v, want 198.18.0.6/30 alone", addrs)
		}
		routes, _ := netlink.RouteList(got, netlink.FAMILY_V4)
		var defaults []string
		for _, r := range routes {
			if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
				defaults = append(defaults, r.Gw.String())
			}
		}
		if len(defaults) != 1 || defaults[0] != "198.18.0.5" {
			t.Errorf("default routes via %v, want via 198.18.0.5 alone", defaults)
		}
		if v6, _ := netlink.AddrList(got, netlink.FAMILY_V6); len(v6) != 0 {
			t.Errorf("eth0 has IPv6 addresses %v, want none", v6)
		}
		if b, err := os.ReadFile("/proc/sys/net/ipv6/conf/eth0/disable_ipv6"); err != nil || string(b) != "1\n" {
			t.Errorf("disable_ipv6 = %q (%v), want 1", b, err)
		}
	})
}

// inVethNetns runs fn on a thread of its own in a new network namespace
// holding a veth pair eth0–peer0 (eth0 with MAC 02:00:00:00:00:01), the
// links named in up brought up. The thread is never unlocked, so Go
// discards it, namespace and all, when fn returns.
func inVethNetns(t *testing.T, up []string, fn func(eth0 netlink.Link)) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", HardwareAddr: mustMAC(t, "02:00:00:00:00:01")}, PeerName: "peer0"}
		if err := netlink.LinkAdd(link); err != nil {
			t.Errorf("add veth: %v", err)
			return
		}
		for _, name := range up {
			if err := netlink.LinkSetUp(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
				t.Errorf("up %s: %v", name, err)
				return
			}
		}
		fn(link)
	}()
	<-done
}

// hasRoute reports whether eth0 has a route to want ("DST" or "DST via GW").
func hasRoute(t *testing.T, want string) bool {
	link, err := netlink.LinkByName("eth0")
	if err != nil {
		t.Errorf("link: %v", err)
		return false
	}
	routes, err := netlink.RouteList(link, netlink.FAMILY_V4)
	if err != nil {
		t.Errorf("routes: %v", err)
		return false
	}
	for _, r := range routes {
		dst := "0.0.0.0/0"
		if r.Dst != nil {
			dst = r.Dst.String()
		}
		if dst == want || (r.Gw != nil && dst+" via "+r.Gw.String() == want) {
			return true
		}
	}
	return false
}

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	mac, err := net.ParseMAC(s)
	if err != nil {
		t.Error(err)
	}
	return mac
}

func mustNet(t *testing.T, s string) *net.IPNet {
	n, err := netlink.ParseIPNet(s)
	if err != nil {
		t.Error(err)
	}
	return n
}

// A node without networking gives every guest an address in one /16: a
// fork child's new address then shares its parent's subnet, and must
// survive the parent's going (the kernel drops a primary's secondaries
// with it unless they are promoted).
func TestSetNetworkReaddressesWithinASubnet(t *testing.T) {
	if os.Geteuid() != 0 {
		testskip.Skip(t, "needs root for a network namespace")
	}
	inVethNetns(t, []string{"peer0"}, func(link netlink.Link) {
		var nc netconf
		defer nc.close()
		for _, n := range []Network{
			{Interface: "eth0", MAC: "02:00:00:00:00:01", Address: "10.88.1.2/16"},
			{Interface: "eth0", MAC: "02:00:00:00:00:02", Address: "10.88.3.4/16"},
		} {
			if err := nc.set(n); err != nil {
				t.Errorf("set %s: %v", n.Address, err)
				return
			}
		}
		addrs, _ := netlink.AddrList(link, netlink.FAMILY_V4)
		if len(addrs) != 1 || addrs[0].IPNet.String() != "10.88.3.4/16" {
			t.Errorf("addresses %v, want 10.88.3.4/16 alone", addrs)
		}
	})
}

// The asked-for address is the card's only one even when it is there
// already: others (added in the guest, left by an earlier failure) go,
// and the default route still goes via the gateway.
func TestSetNetworkDropsOtherAddresses(t *testing.T) {
	if os.Geteuid() != 0 {
		testskip.Skip(t, "needs root for a network namespace")
	}
	inVethNetns(t, []string{"peer0"}, func(link netlink.Link) {
		var nc netconf
		defer nc.close()
		n := Network{Interface: "eth0", Address: "198.18.0.6/30", Gateway: "198.18.0.5"}
		if err := nc.set(n); err != nil {
			t.Errorf("set: %v", err)
			return
		}
		for _, extra := range []string{"198.19.7.7/24", "198.18.0.5/30"} { // another subnet; the same /30
			if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: mustNet(t, extra)}); err != nil {
				t.Errorf("add %s: %v", extra, err)
				return
			}
		}
		if err := nc.set(n); err != nil {
			t.Errorf("set again: %v", err)
			return
		}
		addrs, _ := netlink.AddrList(link, netlink.FAMILY_V4)
		if len(addrs) != 1 || addrs[0].IPNet.String() != "198.18.0.6/30" {
			t.Errorf("addresses %v, want 198.18.0.6/30 alone", addrs)
		}
		if !hasRoute(t, "0.0.0.0/0 via 198.18.0.5") {
			t.Error("no default route via 198.18.0.5")
		}
	})
}
