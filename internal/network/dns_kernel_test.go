package network

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
)

// dnsLab is a Manager in a lab namespace with guests on real TAPs, each
// driven by a testenv.TAPGuest (no VM).
type dnsLab struct {
	t   *testing.T
	lab *testenv.NetLab
	m   *Manager
}

func newDNSLab(t *testing.T, cfg Config) *dnsLab {
	lab := testenv.NewNetLab(t)
	d := &dnsLab{t: t, lab: lab}
	cfg.CIDR, cfg.Uplink, cfg.AllowRanges = "10.213.0.0/24", lab.Uplink, []string{testenv.LabRange}
	if cfg.Upstreams == nil {
		cfg.Upstreams = []string{lab.DNS}
	}
	d.in(func() (err error) { d.m, err = Open(context.Background(), cfg); return })
	t.Cleanup(func() {
		d.m.mu.Lock()
		var guests []string
		for a := range d.m.guests {
			guests = append(guests, a.String())
		}
		d.m.mu.Unlock()
		d.in(func() error {
			for _, g := range guests {
				d.m.Detach(g)
			}
			return d.m.Close()
		})
	})
	return d
}

func (d *dnsLab) in(f func() error) {
	d.t.Helper()
	if err := testenv.InNetns(d.lab.Node, f); err != nil {
		d.t.Fatal(err)
	}
}

// guest attaches a guest with policy p and a TAPGuest on its link.
func (d *dnsLab) guest(p sandbox.Network) (Link, *testenv.TAPGuest) {
	d.t.Helper()
	var l Link
	d.in(func() (err error) {
		if l, err = d.m.Allocate(); err != nil {
			return err
		}
		_, err = d.m.Attach(l.Guest.String(), p)
		return err
	})
	g, err := testenv.OpenTAPGuest(d.lab.Node, l.TAP, l.Guest)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { g.Close() })
	return l, g
}

// query is a DNS query for name, as bytes.
func query(id uint16, name string) []byte {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	q.Id = id
	b, _ := q.Pack()
	return b
}

// ask sends one query from g (claiming src) to any DNS server, as a guest's
// resolver does, and waits up to wait for its answer (nil: none came).
func ask(t *testing.T, g *testenv.TAPGuest, src netip.Addr, name string, wait time.Duration) *dns.Msg {
	t.Helper()
	if err := g.SendUDP(netip.AddrPortFrom(src, 40000), netip.MustParseAddrPort("9.9.9.9:53"), query(77, name)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for {
		_, payload, err := g.ReceiveUDP(deadline)
		if err != nil {
			return nil
		}
		m := new(dns.Msg)
		if m.Unpack(payload) == nil && m.Id == 77 {
			return m
		}
	}
}

// TestSpoofedSourcesAreDropped: a guest whose policy denies everything
// claims another guest's address (allowed everything) for its DNS, and an
// internet address for a datagram out: neither leaves its TAP. The
// forwarder listens on the guests' gateways only.
func TestSpoofedSourcesAreDropped(t *testing.T) {
	d := newDNSLab(t, Config{})
	strictLink, strict := d.guest(sandbox.Network{Enabled: true, Egress: sandbox.EgressDeny})
	openLink, open := d.guest(sandbox.Network{Enabled: true, Egress: sandbox.EgressAllow})

	// Controls: each guest, as itself.
	if m := ask(t, open, openLink.Guest, "allowed.test", 5*time.Second); m == nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Fatalf("the open guest's own query: %v", m)
	}
	if m := ask(t, strict, strictLink.Guest, "denied.test", 5*time.Second); m == nil || m.Rcode != dns.RcodeRefused {
		t.Fatalf("the strict guest's own query: %v", m)
	}
	// The strict guest as the open one: its query must never reach upstream.
	strict.SendUDP(netip.AddrPortFrom(openLink.Guest, 40001), netip.MustParseAddrPort("9.9.9.9:53"), query(78, "spoofed.test"))
	// Out to the internet under an address that is no guest's.
	got := make(chan string, 1)
	pc := listenUDPIn(t, d.lab, testenv.LabHostA+":7778")
	go func() {
		buf := make([]byte, 100)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			got <- fmt.Sprintf("%q from %s", buf[:n], from)
		}
	}()
	open.SendUDP(netip.MustParseAddrPort("198.18.7.7:5000"), netip.MustParseAddrPort(testenv.LabHostA+":7778"), []byte("spoofed"))
	open.SendUDP(netip.AddrPortFrom(openLink.Guest, 5000), netip.MustParseAddrPort(testenv.LabHostA+":7778"), []byte("own"))
	select {
	case s := <-got:
		if !strings.Contains(s, `"own"`) {
			t.Fatalf("a datagram under a spoofed source left: %s", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the open guest's own datagram never arrived")
	}
	// A last query as itself: once it is answered the spoofed one had its chance.
	if m := ask(t, open, openLink.Guest, "other.test", 5*time.Second); m == nil {
		t.Fatal("no answer to the open guest's last query")
	}
	select {
	case s := <-got:
		t.Fatalf("a datagram under a spoofed source left: %s", s)
	default:
	}
	if q := d.lab.Queries(); slices.Contains(q, "spoofed.test") {
		t.Fatalf("a query under another guest's address was forwarded upstream: %v", q)
	}
	table, _ := testenv.Exec(d.lab.Node, "nft", "list", "chain", "inet", "zeish", "sources")
	if !strings.Contains(table, "drop") {
		t.Errorf("sources chain:\n%s", table)
	}
	for _, l := range []Link{strictLink, openLink} {
		if v, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + l.TAP + "/rp_filter"); err == nil {
			t.Errorf("the test sees the host's %s: the lab is not separate (%q)", l.TAP, v)
		}
		if out, _ := testenv.Exec(d.lab.Node, "sysctl", "-n", "net.ipv4.conf."+l.TAP+".rp_filter"); strings.TrimSpace(out) != "1" {
			t.Errorf("%s rp_filter = %q, want 1 (strict)", l.TAP, out)
		}
	}
	// Listening sockets: the forwarder's are on the gateways, none on every address.
	out, err := testenv.Exec(d.lab.Node, "ss", "-Hlnut")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		local := f[4]
		if strings.HasPrefix(local, "0.0.0.0:") || strings.HasPrefix(local, "*:") || strings.HasPrefix(local, "[::]:") {
			t.Errorf("a socket listens on every address: %s", line)
		}
	}
	if !strings.Contains(out, strictLink.Gateway.String()+":") || !strings.Contains(out, openLink.Gateway.String()+":") {
		t.Errorf("no forwarder socket on the gateways:\n%s", out)
	}
}

func listenUDPIn(t *testing.T, lab *testenv.NetLab, addr string) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	if err := testenv.InNetns(lab.Inet, func() (err error) { pc, err = net.ListenPacket("udp4", addr); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

// TestDNSFloodIsBounded: a guest sends 3,000 queries in a burst to a
// silent upstream (each would wait 3 s). The forwarder holds at most its
// workers' goroutines and sockets; the kernel and the guest's rate drop the
// rest; a neighbour's query is still answered.
func TestDNSFloodIsBounded(t *testing.T) {
	// 198.18.9.9 is routed into the lab, where nothing answers it.
	d := newDNSLab(t, Config{Upstreams: []string{"198.18.9.9:53"}, DNS: DNSLimits{Rate: DefaultDNSRate}})
	floodLink, flood := d.guest(sandbox.Network{Enabled: true})
	nLink, neighbour := d.guest(sandbox.Network{Enabled: true})
	time.Sleep(100 * time.Millisecond)
	g0, fd0 := runtime.NumGoroutine(), openFDs(t)
	began := time.Now()
	for i := range 3000 {
		flood.SendUDP(netip.AddrPortFrom(floodLink.Guest, uint16(20000+i%1000)), netip.MustParseAddrPort("9.9.9.9:53"), query(uint16(i), fmt.Sprintf("n%d.flood.test", i)))
	}
	sent := time.Since(began)
	time.Sleep(200 * time.Millisecond)
	g1, fd1 := runtime.NumGoroutine(), openFDs(t)
	t.Logf("3000 queries in %v to a silent upstream: goroutines %+d, fds %+d (workers %d); over rate %d, over in-flight %d, queue full %d",
		sent.Round(time.Millisecond), g1-g0, fd1-fd0, d.m.dns.Workers, d.m.fwd.overRate.Load(), d.m.fwd.overInFlight.Load(), d.m.fwd.queueFull.Load())
	if g1-g0 > dnsGuestInFlight+8 || fd1-fd0 > dnsGuestInFlight+8 {
		t.Errorf("a flood of 3000 queries grew goroutines by %d and fds by %d, want at most its in-flight bound (%d) and a few",
			g1-g0, fd1-fd0, dnsGuestInFlight)
	}
	// The neighbour is still served: its query gets a worker and an answer
	// (SERVFAIL once the silent upstream times out).
	if m := ask(t, neighbour, nLink.Guest, "allowed.test", 10*time.Second); m == nil || m.Rcode != dns.RcodeServerFailure {
		t.Errorf("the neighbour's query during the flood: %v", m)
	}
	counters, _ := testenv.Exec(d.lab.Node, "nft", "list", "chain", "inet", "zeish", "i-"+floodLink.TAP)
	if !strings.Contains(counters, "limit rate over 100/second") {
		t.Errorf("no DNS rate rule in the guest's input chain:\n%s", counters)
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
