package network

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// dnsGuest is the forwarder's side of one guest: a UDP socket and a TCP
// listener on the guest's gateway address only (never the host's other
// addresses, nor another guest's gateway), at a port of their own that the
// guest's DNS is redirected to. The socket a query came in on says whose
// it is; its source must also be that guest's address (the kernel already
// drops any other from the guest's TAP: nft.go's sources chain).
type dnsGuest struct {
	f      *forwarder
	tap    string
	addr   netip.Addr // the guest's address
	port   uint16
	udp    *net.UDPConn
	tcp    *net.TCPListener
	bucket bucket

	inFlight atomic.Int32 // queries queued or upstream
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	closed   bool
}

// openGuest listens for l's guest (on l.Gateway: call it in the manager's
// network namespace) and starts serving it.
func (f *forwarder) openGuest(l Link) (*dnsGuest, error) {
	g := &dnsGuest{f: f, tap: l.TAP, addr: l.Guest, conns: map[net.Conn]struct{}{},
		bucket: bucket{rate: float64(f.limits.Rate), tokens: float64(f.limits.Rate)}}
	var err error
	for try := 0; ; try++ {
		g.udp, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(l.Gateway, 0)))
		if err != nil {
			return nil, fmt.Errorf("dns forwarder for %s: %w", l.TAP, err)
		}
		g.port = uint16(g.udp.LocalAddr().(*net.UDPAddr).Port)
		g.tcp, err = net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(l.Gateway, g.port)))
		if err == nil {
			break
		}
		g.udp.Close()
		if try == 20 {
			return nil, fmt.Errorf("dns forwarder for %s: no port free for both udp and tcp: %w", l.TAP, err)
		}
	}
	f.mu.Lock()
	if old := f.guests[l.TAP]; old != nil {
		defer old.close()
	}
	f.guests[l.TAP] = g
	f.mu.Unlock()
	g.wg.Add(2)
	go g.serveUDP()
	go g.serveTCP()
	return g, nil
}

// guest is the listener of tap's guest, if it has one.
func (f *forwarder) guest(tap string) *dnsGuest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.guests[tap]
}

// closeGuest stops serving tap's guest.
func (f *forwarder) closeGuest(tap string) {
	f.mu.Lock()
	g := f.guests[tap]
	delete(f.guests, tap)
	f.mu.Unlock()
	if g != nil {
		g.close()
	}
}

func (g *dnsGuest) close() {
	g.mu.Lock()
	g.closed = true
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.udp.Close()
	g.tcp.Close()
	g.wg.Wait()
}

// admit takes one query of the guest's rate and in-flight bound.
func (g *dnsGuest) admit() bool {
	if !g.bucket.take(time.Now()) {
		g.f.overRate.Add(1)
		return false
	}
	if g.inFlight.Add(1) > dnsGuestInFlight {
		g.inFlight.Add(-1)
		g.f.overInFlight.Add(1)
		return false
	}
	return true
}

// serveUDP reads the guest's queries. Whatever goes over a bound is
// dropped unanswered: an answer would cost a write for every packet of a
// flood, and a resolver that drops is one a stub retries more slowly.
func (g *dnsGuest) serveUDP() {
	defer g.wg.Done()
	buf := make([]byte, dnsUDPMax)
	for {
		n, src, err := g.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if src.Addr().Unmap() != g.addr || !g.admit() {
			continue
		}
		j := dnsJob{g: g, query: bytes.Clone(buf[:n]), reply: func(b []byte) { g.udp.WriteToUDPAddrPort(b, src) }}
		if !g.f.submit(j) {
			g.inFlight.Add(-1)
		}
	}
}

func (g *dnsGuest) serveTCP() {
	defer g.wg.Done()
	for {
		c, err := g.tcp.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		g.mu.Lock()
		ok := !g.closed && src.Addr().Unmap() == g.addr && len(g.conns) < dnsTCPConns
		if ok {
			g.conns[c] = struct{}{}
			g.wg.Add(1)
		}
		g.mu.Unlock()
		if !ok {
			c.Close()
			continue
		}
		go g.serveConn(c)
	}
}

// serveConn answers the queries of one TCP connection, one at a time.
func (g *dnsGuest) serveConn(c net.Conn) {
	defer g.wg.Done()
	defer func() {
		g.mu.Lock()
		delete(g.conns, c)
		g.mu.Unlock()
		c.Close()
	}()
	var size [2]byte
	for {
		c.SetDeadline(time.Now().Add(dnsTCPIdle))
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		var out []byte
		if !g.admit() {
			out = rcodeFor(query, dns.RcodeRefused)
		} else {
			done := make(chan []byte, 1)
			if g.f.submit(dnsJob{g: g, query: query, tcp: true, reply: func(b []byte) { done <- b }}) {
				select {
				case out = <-done:
				case <-g.f.closed:
					return
				}
			} else {
				g.inFlight.Add(-1)
				out = rcodeFor(query, dns.RcodeServerFailure)
			}
		}
		if out == nil {
			continue
		}
		frame := binary.BigEndian.AppendUint16(nil, uint16(len(out)))
		if _, err := c.Write(append(frame, out...)); err != nil {
			return
		}
	}
}

// rcodeFor answers query with rcode alone, without asking anyone (nil when
// it does not parse).
func rcodeFor(query []byte, rcode int) []byte {
	q := new(dns.Msg)
	if err := q.Unpack(query); err != nil || q.Response {
		return nil
	}
	m := new(dns.Msg)
	m.SetRcode(q, rcode)
	b, _ := m.Pack()
	return b
}

// bucket is a token bucket of rate tokens a second holding at most one
// second's worth; rate 0 lets everything through.
type bucket struct {
	mu           sync.Mutex
	rate, tokens float64
	last         time.Time
}

func (b *bucket) take(now time.Time) bool {
	if b.rate <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() {
		b.tokens = min(b.rate, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
