//go:build linux

package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// A minimal rtnetlink client for the guest's readdressing: one
// NETLINK_ROUTE socket and the handful of messages setNetwork sends, built
// by hand. A fork child runs this in a QEMU whose translation cache is
// empty, so every guest instruction it executes for the first time is
// translated first; a general netlink library (handles, link and address
// objects and their parsers) was most of the network
// part of a fork's configuration call. This is all of it that is needed.

// ipv4DevconfPromoteSecondaries is IPV4_DEVCONF_PROMOTE_SECONDARIES of
// linux/ip.h (x/sys/unix lacks it): the index of promote_secondaries in
// IFLA_INET_CONF.
const ipv4DevconfPromoteSecondaries = 20

// nlAlign rounds n up to netlink's 4-byte alignment.
func nlAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// nlMsg builds one netlink message: header, fixed part, attributes.
type nlMsg struct{ b []byte }

func newNLMsg(typ, flags uint16, fixed []byte) *nlMsg {
	m := &nlMsg{b: make([]byte, unix.NLMSG_HDRLEN, 128)}
	binary.NativeEndian.PutUint16(m.b[4:], typ)
	binary.NativeEndian.PutUint16(m.b[6:], flags|unix.NLM_F_REQUEST)
	m.b = append(m.b, fixed...)
	m.b = m.b[:nlAlign(len(m.b))]
	return m
}

// attr appends one attribute (type, payload, padding).
func (m *nlMsg) attr(typ uint16, data []byte) {
	start := len(m.b)
	m.b = binary.NativeEndian.AppendUint16(m.b, uint16(unix.SizeofRtAttr+len(data)))
	m.b = binary.NativeEndian.AppendUint16(m.b, typ)
	m.b = append(m.b, data...)
	m.b = append(m.b, make([]byte, nlAlign(len(m.b)-start)-(len(m.b)-start))...)
}

// nest appends an attribute whose payload is the attributes fill appends.
func (m *nlMsg) nest(typ uint16, fill func()) {
	start := len(m.b)
	m.attr(typ, nil)
	fill()
	binary.NativeEndian.PutUint16(m.b[start:], uint16(len(m.b)-start))
}

// bytes finishes the message with its length and sequence number.
func (m *nlMsg) bytes(seq uint32) []byte {
	binary.NativeEndian.PutUint32(m.b[0:], uint32(len(m.b)))
	binary.NativeEndian.PutUint32(m.b[8:], seq)
	return m.b
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// ifaddrmsg is struct ifaddrmsg for an IPv4 address of link index.
func ifaddrmsg(index int32, bits int) []byte {
	b := []byte{unix.AF_INET, byte(bits), 0, unix.RT_SCOPE_UNIVERSE}
	return binary.NativeEndian.AppendUint32(b, uint32(index))
}

// newAddrMsg adds p to link index (RTM_NEWADDR, failing if it is there),
// with the broadcast address a /30 or wider gets from ip's "brd +".
func newAddrMsg(index int32, p netip.Prefix) *nlMsg {
	m := newNLMsg(unix.RTM_NEWADDR, unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL, ifaddrmsg(index, p.Bits()))
	a := p.Addr().As4()
	m.attr(unix.IFA_LOCAL, a[:])
	m.attr(unix.IFA_ADDRESS, a[:])
	if p.Bits() < 31 {
		brd := a
		for i := p.Bits(); i < 32; i++ {
			brd[i/8] |= 0x80 >> (i % 8)
		}
		m.attr(unix.IFA_BROADCAST, brd[:])
	}
	return m
}

// delAddrMsg removes p from link index (RTM_DELADDR).
func delAddrMsg(index int32, p netip.Prefix) *nlMsg {
	m := newNLMsg(unix.RTM_DELADDR, unix.NLM_F_ACK, ifaddrmsg(index, p.Bits()))
	a := p.Addr().As4()
	m.attr(unix.IFA_LOCAL, a[:])
	m.attr(unix.IFA_ADDRESS, a[:])
	return m
}

// defaultRouteMsg makes the main table's IPv4 default route go via gw out
// of link index, whatever it was before (RTM_NEWROUTE, create or replace):
// what `ip route replace default via GW dev DEV` sends.
func defaultRouteMsg(index int32, gw netip.Addr) *nlMsg {
	rt := []byte{unix.AF_INET, 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST, 0, 0, 0, 0}
	m := newNLMsg(unix.RTM_NEWROUTE, unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_REPLACE, rt)
	a := gw.As4()
	m.attr(unix.RTA_GATEWAY, a[:])
	m.attr(unix.RTA_OIF, u32(uint32(index)))
	return m
}

// promoteSecondariesMsg sets promote_secondaries on link index
// (RTM_SETLINK, IFLA_AF_SPEC → AF_INET → IFLA_INET_CONF), as writing 1 to
// /proc/sys/net/ipv4/conf/DEV/promote_secondaries does.
func promoteSecondariesMsg(index int32) *nlMsg {
	ifi := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(ifi[4:], uint32(index))
	m := newNLMsg(unix.RTM_SETLINK, unix.NLM_F_ACK, ifi)
	m.nest(unix.IFLA_AF_SPEC, func() {
		m.nest(unix.AF_INET, func() {
			m.nest(unix.IFLA_INET_CONF, func() {
				m.attr(ipv4DevconfPromoteSecondaries, u32(1))
			})
		})
	})
	return m
}

// getAddrsMsg asks for every IPv4 address (RTM_GETADDR dump; the kernel
// filters by link only for strict sockets, so the caller does).
func getAddrsMsg() *nlMsg {
	return newNLMsg(unix.RTM_GETADDR, unix.NLM_F_DUMP, []byte{unix.AF_INET, 0, 0, 0, 0, 0, 0, 0})
}

// rtnl is one NETLINK_ROUTE socket.
type rtnl struct {
	fd  int
	seq uint32
	buf []byte
}

func openRtnl() (*rtnl, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	// A dump's datagrams are at most a page (NLMSG_GOODSIZE) until a
	// reader shows a larger buffer; the rest are single acks.
	return &rtnl{fd: fd, buf: make([]byte, 8<<10)}, nil
}

func (r *rtnl) Close() error { return unix.Close(r.fd) }

// do sends msgs in one write and waits for each one's acknowledgement: the
// kernel runs them in order, each whatever the one before it did, so only
// messages that may all run together belong in one call. It returns the
// errors of the messages that failed, joined.
func (r *rtnl) do(msgs ...*nlMsg) error {
	var out []byte
	first := r.seq + 1
	for _, m := range msgs {
		r.seq++
		out = append(out, m.bytes(r.seq)...)
	}
	if _, err := unix.Write(r.fd, out); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	var errs []error
	pending := len(msgs)
	for pending > 0 {
		replies, err := r.recv()
		if err != nil {
			return err
		}
		for _, rep := range replies {
			if rep.Header.Type != unix.NLMSG_ERROR || rep.Header.Seq < first || rep.Header.Seq > r.seq {
				continue
			}
			pending--
			if code, err := ackError(rep.Data); err != nil {
				return err
			} else if code != 0 {
				errs = append(errs, fmt.Errorf("%s: %w", msgName(msgs[rep.Header.Seq-first]), code))
			}
		}
	}
	return errors.Join(errs...)
}

// ipv4Addrs lists link index's IPv4 addresses.
func (r *rtnl) ipv4Addrs(index int32) ([]netip.Prefix, error) {
	r.seq++
	seq := r.seq
	if _, err := unix.Write(r.fd, getAddrsMsg().bytes(seq)); err != nil {
		return nil, fmt.Errorf("netlink send: %w", err)
	}
	var out []netip.Prefix
	for {
		replies, err := r.recv()
		if err != nil {
			return nil, err
		}
		for _, rep := range replies {
			if rep.Header.Seq != seq {
				continue
			}
			switch rep.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if code, err := ackError(rep.Data); err != nil {
					return nil, err
				} else if code != 0 {
					return nil, fmt.Errorf("list addresses: %w", code)
				}
			case unix.RTM_NEWADDR:
				if p, idx, ok := parseIPv4Addr(rep.Data); ok && idx == index {
					out = append(out, p)
				}
			}
		}
	}
}

func (r *rtnl) recv() ([]syscall.NetlinkMessage, error) {
	n, _, err := unix.Recvfrom(r.fd, r.buf, 0)
	if err != nil {
		return nil, fmt.Errorf("netlink receive: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(r.buf[:n])
	if err != nil {
		return nil, fmt.Errorf("netlink receive: %w", err)
	}
	return msgs, nil
}

// ackError is the errno of an NLMSG_ERROR's payload (0: success).
func ackError(data []byte) (syscall.Errno, error) {
	if len(data) < 4 {
		return 0, errors.New("netlink: short error message")
	}
	return syscall.Errno(-int32(binary.NativeEndian.Uint32(data))), nil
}

// parseIPv4Addr reads an RTM_NEWADDR payload: the address (IFA_LOCAL, or
// IFA_ADDRESS when there is none) with its prefix length, and its link.
func parseIPv4Addr(data []byte) (netip.Prefix, int32, bool) {
	if len(data) < unix.SizeofIfAddrmsg || data[0] != unix.AF_INET {
		return netip.Prefix{}, 0, false
	}
	bits, index := int(data[1]), int32(binary.NativeEndian.Uint32(data[4:]))
	var local, addr []byte
	for b := data[unix.SizeofIfAddrmsg:]; len(b) >= unix.SizeofRtAttr; {
		l, typ := int(binary.NativeEndian.Uint16(b)), binary.NativeEndian.Uint16(b[2:])
		if l < unix.SizeofRtAttr || l > len(b) {
			break
		}
		switch typ {
		case unix.IFA_LOCAL:
			local = b[unix.SizeofRtAttr:l]
		case unix.IFA_ADDRESS:
			addr = b[unix.SizeofRtAttr:l]
		}
		b = b[min(nlAlign(l), len(b)):]
	}
	if local == nil {
		local = addr
	}
	ip, ok := netip.AddrFromSlice(local)
	if !ok || !ip.Is4() {
		return netip.Prefix{}, 0, false
	}
	return netip.PrefixFrom(ip, bits), index, true
}

// msgName says which request an error belongs to.
func msgName(m *nlMsg) string {
	switch binary.NativeEndian.Uint16(m.b[4:]) {
	case unix.RTM_NEWADDR:
		return "add address"
	case unix.RTM_DELADDR:
		return "remove address"
	case unix.RTM_NEWROUTE:
		return "replace default route"
	case unix.RTM_SETLINK:
		return "set link"
	}
	return "netlink request"
}
