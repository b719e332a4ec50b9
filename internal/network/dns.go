package network

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// MinLearnTTL is the shortest time an address a DNS answer gave is let
// through for: answers with TTL 0 or 1 would otherwise expire between the
// answer and the guest's connect.
const MinLearnTTL = 30 * time.Second

// DNSLimits bound what the forwarder does for guests (ZEISH_DNS_RATE,
// ZEISH_DNS_WORKERS).
type DNSLimits struct {
	// Rate is each guest's queries per second, with a burst of one second's
	// worth (0: uncapped). The kernel drops UDP over it before the
	// forwarder reads it (TCP: four packets a query); the forwarder counts
	// queries too, and drops (UDP) or refuses (TCP) what goes over.
	Rate int64
	// Workers is how many queries the node has upstream at once, for all
	// guests together; each holds one upstream socket while it waits.
	Workers int
}

// Defaults: a package install or a browser resolves tens of names a
// second at most; a node's resolver answers thousands.
const (
	DefaultDNSRate    = 100
	DefaultDNSWorkers = 64
)

const (
	// dnsGuestInFlight bounds one guest's queries waiting for or holding a
	// worker, so a guest flooding within its rate (or against a silent
	// upstream) takes at most this many workers from its neighbours.
	dnsGuestInFlight = 8
	// dnsTCPConns bounds one guest's open TCP connections to the forwarder;
	// one idle for dnsTCPIdle is closed.
	dnsTCPConns = 4
	dnsTCPIdle  = 10 * time.Second
	// dnsQueueFactor: jobs that may wait for a worker, per worker.
	dnsQueueFactor = 4
	// dnsUDPMax is the largest query read over UDP (EDNS's usual 4096).
	dnsUDPMax = 4096
	// denyMinTTL: addresses of a denied name are blocked for at least this
	// long, longer than denyRefresh, so a name still denied never lapses
	// between two lookups.
	denyMinTTL  = 10 * time.Minute
	denyRefresh = 5 * time.Minute
)

// dnsVerdict is what the forwarder asks the manager about one query.
type dnsVerdict struct {
	known   bool   // the source is a guest
	refuse  bool   // a deny rule names it, or egress deny and no allow rule does: answer REFUSED, ask nobody
	learnTo string // the guest's TAP when an allow rule names it: let the answered addresses through
	// denyTo is the guest's TAP when a deny rule names it under egress
	// allow: the name's addresses are looked up anyway and blocked, so the
	// guest cannot reach them by an address it got elsewhere (DoH, a
	// hard-coded one) either.
	denyTo string
}

// forwarder is the DNS server every guest uses: its DNS, to any server, is
// redirected to a socket of its own on its gateway (dnsguest.go). It
// answers only the guest of each socket, forwards to the host's resolvers
// through a bounded pool of workers, and applies the domain part of each
// guest's policy.
type forwarder struct {
	log       *slog.Logger
	upstreams []string
	limits    DNSLimits
	decide    func(guest netip.Addr, name string) dnsVerdict
	learn     func(tap string, allow bool, addrs []netip.Addr, ttl time.Duration) error
	// exchange asks upstream; tests and the fuzzer put their own.
	exchange func(ctx context.Context, q *dns.Msg, tcp bool) (*dns.Msg, error)
	// enter puts a worker's thread in the manager's network namespace:
	// upstream sockets are made in the namespace of the thread that makes
	// them, and the caller of Open (a test's, in a lab) may be in another.
	enter func() error

	jobs    chan dnsJob
	closed  chan struct{}
	workers sync.WaitGroup

	mu     sync.Mutex
	guests map[string]*dnsGuest // by TAP

	// Counters, for tests and the log: queries dropped or refused for the
	// guest's rate, its in-flight bound, or a full queue.
	overRate, overInFlight, queueFull atomic.Int64
}

// dnsJob is one query (reply answers it) or one lookup of a denied name
// (deny: no guest is answered).
type dnsJob struct {
	g     *dnsGuest
	query []byte
	tcp   bool
	reply func([]byte)
	deny  string
}

func newForwarder(log *slog.Logger, upstreams []string, limits DNSLimits, enter func() error, decide func(netip.Addr, string) dnsVerdict,
	learn func(string, bool, []netip.Addr, time.Duration) error) *forwarder {
	if limits.Workers <= 0 {
		limits.Workers = DefaultDNSWorkers
	}
	f := &forwarder{log: log, upstreams: upstreams, limits: limits, enter: enter, decide: decide, learn: learn,
		jobs: make(chan dnsJob, limits.Workers*dnsQueueFactor), closed: make(chan struct{}), guests: map[string]*dnsGuest{}}
	f.exchange = f.ask
	for range limits.Workers {
		f.workers.Add(1)
		go f.work()
	}
	return f
}

// close stops every guest's sockets, then the workers.
func (f *forwarder) close() {
	f.mu.Lock()
	gs := f.guests
	f.guests = map[string]*dnsGuest{}
	f.mu.Unlock()
	for _, g := range gs {
		g.close()
	}
	close(f.closed)
	f.workers.Wait()
}

func (f *forwarder) work() {
	defer f.workers.Done()
	if f.enter != nil {
		if err := f.enter(); err != nil {
			f.log.Error("dns forwarder: worker: enter the network namespace", "err", err)
			return
		}
	}
	for {
		select {
		case <-f.closed:
			return
		case j := <-f.jobs:
			f.run(j)
		}
	}
}

// submit queues j without waiting: a full queue drops it (false).
func (f *forwarder) submit(j dnsJob) bool {
	select {
	case f.jobs <- j:
		return true
	default:
		f.queueFull.Add(1)
		return false
	}
}

func (f *forwarder) run(j dnsJob) {
	defer j.g.inFlight.Add(-1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if j.deny != "" {
		f.blockDenied(ctx, j.g, j.deny)
		return
	}
	if out := f.answer(ctx, j.g, j.query, j.tcp); out != nil && j.reply != nil {
		j.reply(out)
	}
}

// answer is the forwarder's reply to one query of guest g (nil: none).
// Everything in query is the guest's: it is parsed, never trusted.
func (f *forwarder) answer(ctx context.Context, g *dnsGuest, query []byte, tcp bool) []byte {
	q := new(dns.Msg)
	if err := q.Unpack(query); err != nil {
		return formatError(query)
	}
	if q.Response {
		return nil // never answer an answer (no loops, no reflection)
	}
	reply := func(rcode int) []byte {
		m := new(dns.Msg)
		m.SetRcode(q, rcode)
		return pack(m, q, tcp)
	}
	if q.Opcode != dns.OpcodeQuery {
		return reply(dns.RcodeNotImplemented)
	}
	if len(q.Question) != 1 {
		return reply(dns.RcodeFormatError)
	}
	name := strings.TrimSuffix(strings.ToLower(q.Question[0].Name), ".")
	v := f.decide(g.addr, name)
	switch {
	case !v.known:
		return reply(dns.RcodeRefused)
	case v.refuse:
		if v.denyTo != "" {
			f.lookUpDenied(g, name)
		}
		return reply(dns.RcodeRefused)
	}
	resp, err := f.exchange(ctx, q, tcp)
	if err != nil {
		f.log.Debug("dns upstream failed", "name", name, "err", err)
		return reply(dns.RcodeServerFailure)
	}
	if v.learnTo != "" {
		// Before the answer goes out: the guest connects right after it.
		if addrs, ttl := answerAddrs(resp, MinLearnTTL); len(addrs) > 0 {
			if err := f.learn(v.learnTo, true, addrs, ttl); err != nil {
				f.log.Warn("dns: allow answered addresses", "name", name, "err", err)
				return reply(dns.RcodeServerFailure)
			}
		}
	}
	resp.Id = q.Id
	return pack(resp, q, tcp)
}

// lookUpDenied queues a lookup of a denied name, counted against g's
// queries in flight like one of its own.
func (f *forwarder) lookUpDenied(g *dnsGuest, name string) {
	if g.inFlight.Add(1) > dnsGuestInFlight || !f.submit(dnsJob{g: g, deny: name}) {
		g.inFlight.Add(-1)
	}
}

// blockDenied asks upstream for a denied name's addresses and puts them in
// the guest's deny set: its queries for the name are refused, and its
// connections to those addresses dropped, however it learnt them.
func (f *forwarder) blockDenied(ctx context.Context, g *dnsGuest, name string) {
	addrs, ttl, err := f.lookUp(ctx, name)
	if err != nil {
		f.log.Debug("dns: look up a denied name", "name", name, "err", err)
		return
	}
	if len(addrs) > 0 {
		if err := f.learn(g.tap, false, addrs, ttl); err != nil {
			f.log.Warn("dns: block a denied name's addresses", "name", name, "err", err)
		}
	}
}

// lookUp asks upstream for name's IPv4 addresses, to be blocked for their
// TTL (at least denyMinTTL).
func (f *forwarder) lookUp(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	resp, err := f.exchange(ctx, q, false)
	if err != nil {
		return nil, 0, err
	}
	addrs, ttl := answerAddrs(resp, denyMinTTL)
	return addrs, ttl, nil
}

// answerAddrs are the IPv4 addresses of resp's answer, and how long to
// keep them: their longest TTL, at least least.
func answerAddrs(resp *dns.Msg, least time.Duration) ([]netip.Addr, time.Duration) {
	var addrs []netip.Addr
	ttl := least
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
				addrs = append(addrs, ip)
				ttl = max(ttl, time.Duration(a.Hdr.Ttl)*time.Second)
			}
		}
	}
	return addrs, ttl
}

// pack encodes m for the guest; over UDP it is cut to what the query said
// it takes (512 bytes, or its EDNS size), truncated flag set.
func pack(m, q *dns.Msg, tcp bool) []byte {
	if !tcp {
		size := dns.MinMsgSize
		if opt := q.IsEdns0(); opt != nil {
			size = max(size, min(int(opt.UDPSize()), dnsUDPMax))
		}
		m.Truncate(size)
	}
	b, err := m.Pack()
	if err != nil {
		return nil
	}
	return b
}

// formatError answers a query that does not parse, when its header does.
func formatError(query []byte) []byte {
	if len(query) < 12 || query[2]&0x80 != 0 { // no header, or an answer
		return nil
	}
	m := new(dns.Msg)
	m.Id = uint16(query[0])<<8 | uint16(query[1])
	m.Response = true
	m.Rcode = dns.RcodeFormatError
	b, _ := m.Pack()
	return b
}

// ask asks each upstream in turn; a truncated UDP answer is asked again over TCP.
func (f *forwarder) ask(ctx context.Context, q *dns.Msg, tcp bool) (*dns.Msg, error) {
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
