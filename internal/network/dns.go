package network

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// MinLearnTTL is the shortest time an address a DNS answer gave is let
// through for: answers with TTL 0 or 1 would otherwise expire between the
// answer and the guest's connect.
const MinLearnTTL = 30 * time.Second

// verdictFor is what the forwarder asks the manager about one query.
type dnsVerdict struct {
	known   bool   // the source is a guest
	refuse  bool   // a deny rule names it, or egress deny and no allow rule does: answer REFUSED, ask nobody
	learnTo string // the guest's TAP when an allow rule names it: let the answered addresses through
}

// forwarder is the DNS server every guest uses (its gateway, port 53, is
// redirected here). It answers only guests, forwards to the host's
// resolvers, and applies the domain part of each guest's policy.
type forwarder struct {
	log       *slog.Logger
	upstreams []string
	port      uint16
	udp, tcp  *dns.Server
	decide    func(src netip.Addr, name string) dnsVerdict
	learn     func(tap string, addrs []netip.Addr, ttl time.Duration) error
}

// startForwarder listens on every address at an ephemeral port (the same
// for UDP and TCP); nftables redirects guests' port 53 to it.
func startForwarder(log *slog.Logger, upstreams []string, decide func(netip.Addr, string) dnsVerdict,
	learn func(string, []netip.Addr, time.Duration) error) (*forwarder, error) {
	f := &forwarder{log: log, upstreams: upstreams, decide: decide, learn: learn}
	var pc net.PacketConn
	var ln net.Listener
	for try := 0; ; try++ {
		var err error
		pc, err = net.ListenPacket("udp4", "0.0.0.0:0")
		if err != nil {
			return nil, err
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		if err == nil {
			f.port = uint16(port)
			break
		}
		pc.Close()
		if try == 20 {
			return nil, fmt.Errorf("dns forwarder: no port free for both udp and tcp: %w", err)
		}
	}
	f.udp = &dns.Server{PacketConn: pc, Handler: f}
	f.tcp = &dns.Server{Listener: ln, Handler: f}
	for _, s := range []*dns.Server{f.udp, f.tcp} {
		go func() {
			if err := s.ActivateAndServe(); err != nil {
				log.Debug("dns forwarder stopped", "err", err)
			}
		}()
	}
	return f, nil
}

func (f *forwarder) close() {
	f.udp.Shutdown()
	f.tcp.Shutdown()
}

func (f *forwarder) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	src, _ := netip.ParseAddrPort(w.RemoteAddr().String())
	reply := func(rcode int) {
		m := new(dns.Msg)
		m.SetRcode(q, rcode)
		w.WriteMsg(m)
	}
	if len(q.Question) != 1 {
		reply(dns.RcodeFormatError)
		return
	}
	name := strings.TrimSuffix(strings.ToLower(q.Question[0].Name), ".")
	v := f.decide(src.Addr().Unmap(), name)
	switch {
	case !v.known:
		// Not a guest (the port is open on every address of the host):
		// never be anyone's open resolver.
		reply(dns.RcodeRefused)
		return
	case v.refuse:
		reply(dns.RcodeRefused)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, tcp := w.RemoteAddr().(*net.TCPAddr)
	resp, err := f.exchange(ctx, q, tcp)
	if err != nil {
		f.log.Debug("dns upstream failed", "name", name, "err", err)
		reply(dns.RcodeServerFailure)
		return
	}
	if v.learnTo != "" {
		var addrs []netip.Addr
		ttl := MinLearnTTL
		for _, rr := range resp.Answer {
			if a, ok := rr.(*dns.A); ok {
				if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
					addrs = append(addrs, ip)
					ttl = max(ttl, time.Duration(a.Hdr.Ttl)*time.Second)
				}
			}
		}
		// Before the answer goes out: the guest connects right after it.
		if len(addrs) > 0 {
			if err := f.learn(v.learnTo, addrs, ttl); err != nil {
				f.log.Warn("dns: allow answered addresses", "name", name, "err", err)
				reply(dns.RcodeServerFailure)
				return
			}
		}
	}
	resp.Id = q.Id
	w.WriteMsg(resp)
}

// exchange asks each upstream in turn; a truncated UDP answer is asked again over TCP.
func (f *forwarder) exchange(ctx context.Context, q *dns.Msg, tcp bool) (*dns.Msg, error) {
	var last error
	for _, up := range f.upstreams {
		net := "udp"
		if tcp {
			net = "tcp"
		}
		c := &dns.Client{Net: net, Timeout: 3 * time.Second}
		resp, _, err := c.ExchangeContext(ctx, q, up)
		if err == nil && resp.Truncated && !tcp {
			c.Net = "tcp"
			resp, _, err = c.ExchangeContext(ctx, q, up)
		}
		if err == nil {
			return resp, nil
		}
		last = err
	}
	if last == nil {
		last = fmt.Errorf("no upstream resolver configured")
	}
	return nil, last
}

// ResolvConfServers reads the nameservers of a resolv.conf as host:53.
func ResolvConfServers(content string) []string {
	var out []string
	for _, line := range strings.Split(content, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				out = append(out, netip.AddrPortFrom(a.WithZone(""), 53).String())
			}
		}
	}
	return out
}
