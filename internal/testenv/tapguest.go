package testenv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TAPGuest stands in for a VM on a TAP that zeishd made: it opens a queue
// of the TAP and writes and reads Ethernet frames as a guest's NIC would,
// so a test sends what a guest can send (a spoofed source address
// included) through the real TAP, nftables and routing, without booting a
// VM. Only IPv4 over UDP: enough for DNS and for probing the firewall.
type TAPGuest struct {
	f       *os.File
	mac     net.HardwareAddr
	hostMAC net.HardwareAddr
	Addr    netip.Addr // the guest's own address
}

// guestMAC is the TAP guest's MAC (locally administered).
var guestMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x7e, 0x57, 0x01}

// vnetHdrLen: zeishd's TAPs carry a virtio-net header before each frame
// (IFF_VNET_HDR, default size).
const vnetHdrLen = 10

// OpenTAPGuest attaches to TAP tap in namespace ns as the guest at addr;
// the host reaches it without ARP (a permanent neighbour entry).
func OpenTAPGuest(ns, tap string, addr netip.Addr) (*TAPGuest, error) {
	g := &TAPGuest{mac: guestMAC, Addr: addr}
	err := InNetns(ns, func() error {
		ifc, err := net.InterfaceByName(tap)
		if err != nil {
			return err
		}
		g.hostMAC = ifc.HardwareAddr
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		var req struct {
			name  [unix.IFNAMSIZ]byte
			flags uint16
			_     [22]byte
		}
		copy(req.name[:], tap)
		req.flags = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req))); errno != 0 {
			unix.Close(fd)
			return fmt.Errorf("attach to tap %s: %w", tap, errno)
		}
		g.f = os.NewFile(uintptr(fd), "tap:"+tap) // non-blocking: deadlines work
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out, err := Exec(ns, "ip", "neigh", "replace", addr.String(), "lladdr", g.mac.String(), "dev", tap, "nud", "permanent"); err != nil {
		g.f.Close()
		return nil, fmt.Errorf("neighbour %s: %v: %s", addr, err, out)
	}
	return g, nil
}

// Close detaches from the TAP.
func (g *TAPGuest) Close() error { return g.f.Close() }

// SendUDP sends one UDP datagram from src (the guest's address, or any it
// likes to claim) to dst.
func (g *TAPGuest) SendUDP(src, dst netip.AddrPort, payload []byte) error {
	ip := make([]byte, 20+8+len(payload))
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	ip[8] = 64 // TTL
	ip[9] = unix.IPPROTO_UDP
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:], checksum(ip[:20]))
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	copy(udp[8:], payload) // checksum 0: none, which IPv4 allows
	frame := make([]byte, vnetHdrLen, vnetHdrLen+14+len(ip))
	frame = append(frame, g.hostMAC...)
	frame = append(frame, g.mac...)
	frame = append(frame, 0x08, 0x00)
	frame = append(frame, ip...)
	_, err := g.f.Write(frame)
	return err
}

// ErrNoDatagram: nothing for the guest came before the deadline.
var ErrNoDatagram = errors.New("no datagram before the deadline")

// ReceiveUDP returns the next UDP datagram the host sends the guest
// (anything else on the wire is skipped), or ErrNoDatagram by deadline.
func (g *TAPGuest) ReceiveUDP(deadline time.Time) (src netip.AddrPort, payload []byte, err error) {
	g.f.SetReadDeadline(deadline)
	buf := make([]byte, 65536)
	for {
		n, err := g.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return src, nil, ErrNoDatagram
			}
			return src, nil, err
		}
		fr := buf[vnetHdrLen:n]
		if len(fr) < 14+20+8 || fr[12] != 0x08 || fr[13] != 0x00 {
			continue
		}
		ip := fr[14:]
		ihl := int(ip[0]&0x0f) * 4
		if ip[9] != unix.IPPROTO_UDP || len(ip) < ihl+8 {
			continue
		}
		udp := ip[ihl:]
		size := int(binary.BigEndian.Uint16(udp[4:]))
		if size < 8 || size > len(udp) {
			continue
		}
		from := netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), binary.BigEndian.Uint16(udp[0:]))
		return from, append([]byte(nil), udp[8:size]...), nil
	}
}

func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
