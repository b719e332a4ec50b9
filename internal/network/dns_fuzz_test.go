package network

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/zeish/zeish/sandbox"
)

// fuzzForwarder is a forwarder without sockets or workers whose upstream
// answers every name with one address and records what it was asked.
func fuzzForwarder(t *testing.T, policy sandbox.Network) (*forwarder, *dnsGuest, *[]string) {
	l := Link{TAP: "zt-0", Guest: netip.MustParseAddr("10.213.0.2")}
	m := &Manager{guests: map[netip.Addr]*guestNet{l.Guest: compile(l, policy, Rates{})}}
	asked := &[]string{}
	f := &forwarder{log: slog.New(slog.NewTextHandler(io.Discard, nil)), decide: m.decide,
		learn: func(string, bool, []netip.Addr, time.Duration) error { return nil },
		jobs:  make(chan dnsJob, 4), guests: map[string]*dnsGuest{}}
	f.exchange = func(_ context.Context, q *dns.Msg, _ bool) (*dns.Msg, error) {
		*asked = append(*asked, strings.TrimSuffix(strings.ToLower(q.Question[0].Name), "."))
		r := new(dns.Msg)
		r.SetReply(q)
		r.Answer = append(r.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
			A: net.IPv4(198, 18, 5, 5)})
		return r, nil
	}
	return f, &dnsGuest{f: f, tap: l.TAP, addr: l.Guest}, asked
}

// FuzzServeDNS feeds arbitrary bytes to the forwarder as a guest's query
// (UDP and TCP): never a panic; an answer, when there is one, parses and
// carries the query's id; under egress deny only allowed names are ever
// asked upstream, and a denied one never is.
func FuzzServeDNS(f *testing.F) {
	for _, name := range []string{"files.pypi.org", "x.pypi.org", "evil.example", "PYPI.org.", "a.b.c.d.e.f"} {
		f.Add(query(1, name), false)
	}
	many := new(dns.Msg)
	many.Question = []dns.Question{{Name: "a.", Qtype: dns.TypeA, Qclass: dns.ClassINET}, {Name: "b.", Qtype: dns.TypeA, Qclass: dns.ClassINET}}
	b, _ := many.Pack()
	f.Add(b, true)
	edns := new(dns.Msg)
	edns.SetQuestion("files.pypi.org.", dns.TypeTXT)
	edns.SetEdns0(65535, true)
	b, _ = edns.Pack()
	f.Add(b, false)
	f.Add([]byte{0, 1, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0}, false) // an answer
	f.Add([]byte{0, 1, 2}, false)
	f.Fuzz(func(t *testing.T, raw []byte, tcp bool) {
		fw, g, asked := fuzzForwarder(t, sandbox.Network{Enabled: true, Egress: sandbox.EgressDeny,
			Allow: []string{"*.pypi.org"}, Deny: []string{"x.pypi.org"}})
		out := fw.answer(context.Background(), g, raw, tcp)
		if out != nil {
			m := new(dns.Msg)
			if err := m.Unpack(out); err != nil {
				t.Fatalf("answer to %x does not parse: %v", raw, err)
			}
			if len(raw) >= 2 && m.Id != uint16(raw[0])<<8|uint16(raw[1]) {
				t.Fatalf("answer id %d to query %x", m.Id, raw)
			}
			if !tcp && len(out) > dnsUDPMax {
				t.Fatalf("a UDP answer of %d bytes", len(out))
			}
		}
		for _, name := range *asked {
			if !strings.HasSuffix(name, ".pypi.org") || name == "x.pypi.org" {
				t.Fatalf("asked upstream for %q under egress deny", name)
			}
		}
	})
}
