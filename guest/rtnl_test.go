//go:build linux

package guest

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/zeish/zeish/internal/testskip"
)

// The hand-built messages, parsed back with the standard library's netlink
// parser: header, fixed part and every attribute.
func TestRtnlMessages(t *testing.T) {
	ip := func(s string) []byte { a := netip.MustParseAddr(s).As4(); return a[:] }
	ifaddr := func(bits, index int) []byte {
		return binary.NativeEndian.AppendUint32([]byte{unix.AF_INET, byte(bits), 0, unix.RT_SCOPE_UNIVERSE}, uint32(index))
	}
	type attr struct {
		typ  uint16
		data []byte
	}
	for _, tc := range []struct {
		name  string
		msg   *nlMsg
		typ   uint16
		flags uint16
		fixed []byte
		attrs []attr
	}{
		{"add a /30: broadcast", newAddrMsg(3, netip.MustParsePrefix("198.18.0.6/30")),
			unix.RTM_NEWADDR, unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_EXCL, ifaddr(30, 3),
			[]attr{{unix.IFA_LOCAL, ip("198.18.0.6")}, {unix.IFA_ADDRESS, ip("198.18.0.6")}, {unix.IFA_BROADCAST, ip("198.18.0.7")}}},
		{"add a /16: broadcast", newAddrMsg(2, netip.MustParsePrefix("10.88.3.4/16")),
			unix.RTM_NEWADDR, unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_EXCL, ifaddr(16, 2),
			[]attr{{unix.IFA_LOCAL, ip("10.88.3.4")}, {unix.IFA_ADDRESS, ip("10.88.3.4")}, {unix.IFA_BROADCAST, ip("10.88.255.255")}}},
		{"add a /31: no broadcast", newAddrMsg(2, netip.MustParsePrefix("198.18.0.0/31")),
			unix.RTM_NEWADDR, unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_EXCL, ifaddr(31, 2),
			[]attr{{unix.IFA_LOCAL, ip("198.18.0.0")}, {unix.IFA_ADDRESS, ip("198.18.0.0")}}},
		{"remove", delAddrMsg(7, netip.MustParsePrefix("198.18.0.2/30")),
			unix.RTM_DELADDR, unix.NLM_F_REQUEST | unix.NLM_F_ACK, ifaddr(30, 7),
			[]attr{{unix.IFA_LOCAL, ip("198.18.0.2")}, {unix.IFA_ADDRESS, ip("198.18.0.2")}}},
		{"default route", defaultRouteMsg(3, netip.MustParseAddr("198.18.0.5")),
			unix.RTM_NEWROUTE, unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_REPLACE,
			[]byte{unix.AF_INET, 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST, 0, 0, 0, 0},
			[]attr{{unix.RTA_GATEWAY, ip("198.18.0.5")}, {unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, 3)}}},
		{"list addresses", getAddrsMsg(),
			unix.RTM_GETADDR, unix.NLM_F_REQUEST | unix.NLM_F_DUMP, []byte{unix.AF_INET, 0, 0, 0, 0, 0, 0, 0}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs, err := syscall.ParseNetlinkMessage(tc.msg.bytes(42))
			if err != nil || len(msgs) != 1 {
				t.Fatalf("parse: %d messages, %v", len(msgs), err)
			}
			m := msgs[0]
			if m.Header.Type != tc.typ || m.Header.Flags != tc.flags || m.Header.Seq != 42 {
				t.Errorf("header type %d flags %#x seq %d, want %d %#x 42", m.Header.Type, m.Header.Flags, m.Header.Seq, tc.typ, tc.flags)
			}
			if len(m.Data) < len(tc.fixed) || !slices.Equal(m.Data[:len(tc.fixed)], tc.fixed) {
				t.Fatalf("fixed part % x, want % x", m.Data, tc.fixed)
			}
			var got []attr
			for b := m.Data[nlAlign(len(tc.fixed)):]; len(b) > 0; {
				l := int(binary.NativeEndian.Uint16(b))
				if l < 4 || l > len(b) {
					t.Fatalf("attribute length %d of %d bytes left", l, len(b))
				}
				got = append(got, attr{binary.NativeEndian.Uint16(b[2:]), b[4:l]})
				b = b[min(nlAlign(l), len(b)):]
			}
			if !slices.EqualFunc(got, tc.attrs, func(a, b attr) bool { return a.typ == b.typ && slices.Equal(a.data, b.data) }) {
				t.Errorf("attributes %v, want %v", got, tc.attrs)
			}
		})
	}
}

// promote_secondaries sits three nests deep: IFLA_AF_SPEC → AF_INET →
// IFLA_INET_CONF → [20] = 1.
func TestRtnlPromoteSecondariesMessage(t *testing.T) {
	msgs, err := syscall.ParseNetlinkMessage(promoteSecondariesMsg(5).bytes(1))
	if err != nil || len(msgs) != 1 {
		t.Fatalf("parse: %d messages, %v", len(msgs), err)
	}
	m := msgs[0]
	if m.Header.Type != unix.RTM_SETLINK || m.Header.Flags != unix.NLM_F_REQUEST|unix.NLM_F_ACK {
		t.Errorf("header type %d flags %#x", m.Header.Type, m.Header.Flags)
	}
	if idx := int32(binary.NativeEndian.Uint32(m.Data[4:])); idx != 5 {
		t.Errorf("ifinfomsg index %d, want 5", idx)
	}
	b := m.Data[unix.SizeofIfInfomsg:]
	for _, want := range []uint16{unix.IFLA_AF_SPEC, unix.AF_INET, unix.IFLA_INET_CONF, ipv4DevconfPromoteSecondaries} {
		if len(b) < 4 {
			t.Fatalf("no attribute %d", want)
		}
		l, typ := int(binary.NativeEndian.Uint16(b)), binary.NativeEndian.Uint16(b[2:])
		if typ != want || l > len(b) {
			t.Fatalf("attribute %d (length %d of %d), want %d", typ, l, len(b), want)
		}
		b = b[4:l]
	}
	if v := binary.NativeEndian.Uint32(b); len(b) != 4 || v != 1 {
		t.Errorf("promote_secondaries = % x, want 1", b)
	}
}

// parseIPv4Addr reads what the kernel answers a dump with, which is laid
// out as RTM_NEWADDR's request.
func TestParseIPv4Addr(t *testing.T) {
	onlyAddress := newNLMsg(unix.RTM_NEWADDR, 0, ifaddrmsg(4, 24))
	onlyAddress.attr(unix.IFA_ADDRESS, []byte{192, 0, 2, 9})
	v6 := newNLMsg(unix.RTM_NEWADDR, 0, []byte{unix.AF_INET6, 64, 0, 0, 1, 0, 0, 0})
	for _, tc := range []struct {
		name  string
		msg   *nlMsg
		want  netip.Prefix
		index int32
		ok    bool
	}{
		{"local and address", newAddrMsg(3, netip.MustParsePrefix("198.18.0.6/30")), netip.MustParsePrefix("198.18.0.6/30"), 3, true},
		{"address alone", onlyAddress, netip.MustParsePrefix("192.0.2.9/24"), 4, true},
		{"IPv6", v6, netip.Prefix{}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.msg.bytes(1)
			p, index, ok := parseIPv4Addr(b[unix.NLMSG_HDRLEN:])
			if p != tc.want || index != tc.index || ok != tc.ok {
				t.Errorf("parseIPv4Addr = %v, %d, %v; want %v, %d, %v", p, index, ok, tc.want, tc.index, tc.ok)
			}
		})
	}
}

// Against a real kernel: a batch runs every message and reports each
// failure under its own name, and the listing sees what was added.
func TestRtnlBatch(t *testing.T) {
	if os.Geteuid() != 0 {
		testskip.Skip(t, "needs root for a network namespace")
	}
	inVethNetns(t, []string{"peer0", "eth0"}, func(link netlink.Link) {
		r, err := openRtnl()
		if err != nil {
			t.Error(err)
			return
		}
		defer r.Close()
		index := int32(link.Attrs().Index)
		a, b := netip.MustParsePrefix("198.18.0.2/30"), netip.MustParsePrefix("198.18.0.6/30")
		// The removal fails (not there), the add after it still runs.
		err = r.do(delAddrMsg(index, b), newAddrMsg(index, a))
		if !errors.Is(err, unix.EADDRNOTAVAIL) {
			t.Errorf("do = %v, want the removal's EADDRNOTAVAIL", err)
		}
		if err := r.do(newAddrMsg(index, b), defaultRouteMsg(index, netip.MustParseAddr("198.18.0.5"))); err != nil {
			t.Errorf("do: %v", err)
		}
		if err := r.do(newAddrMsg(index, b)); !errors.Is(err, unix.EEXIST) {
			t.Errorf("adding %s twice = %v, want EEXIST", b, err)
		}
		got, err := r.ipv4Addrs(index)
		if err != nil || !slices.Equal(got, []netip.Prefix{a, b}) {
			t.Errorf("ipv4Addrs = %v, %v; want %v", got, err, []netip.Prefix{a, b})
		}
		if !hasRoute(t, "0.0.0.0/0 via 198.18.0.5") {
			t.Error("no default route via 198.18.0.5")
		}
		if other, err := r.ipv4Addrs(index + 100); err != nil || len(other) != 0 {
			t.Errorf("another link's addresses = %v, %v; want none", other, err)
		}
	})
}
