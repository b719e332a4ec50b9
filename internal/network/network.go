// Package network gives every sandbox its own routed link: a TAP device on
// the host with a /30 out of a pool, masquerade out through the uplink, an
// nftables ruleset that isolates guests (from the host, from each other, from
// private and link-local ranges) and applies each one's egress policy, and a
// DNS forwarder that guests use, which enforces the domain rules. Everything
// it makes carries zeishd's names (TAPs "zt-N", table "inet zeish"); it is
// rebuilt at start and removed when the last guest goes.
package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"github.com/zeish/zeish/sandbox"
)

// Config is the node's network setup (ZEISH_NET_* in the environment).
type Config struct {
	// CIDR is the pool guests' links come from; "" picks a private range
	// none of the host's routes overlaps.
	CIDR string
	// Uplink is the interface guests' traffic leaves by (masqueraded);
	// "" takes the default route's.
	Uplink string
	// Upstreams are the resolvers the DNS forwarder asks (host:port); empty:
	// the nameservers of /etc/resolv.conf.
	Upstreams []string
	// AllowRanges are ranges the operator opens to guests out of the ones
	// blocked by default (DefaultBlocked).
	AllowRanges []string
	// Rates are each guest's default caps, and the most one may ask for
	// (0: uncapped).
	Rates Rates
	// DNS bounds the DNS forwarder: each guest's query rate (0: uncapped),
	// the node's queries upstream at once (0: DefaultDNSWorkers).
	DNS    DNSLimits
	Logger *slog.Logger
}

// Manager owns the node's guest networking.
type Manager struct {
	log    *slog.Logger
	nl     *netlink.Handle
	pool   *Pool
	uplink string
	rs     *ruleset
	fwd    *forwarder
	rates  Rates
	dns    DNSLimits

	mu     sync.Mutex
	guests map[netip.Addr]*guestNet
	// warm are links made ahead (warm.go); made names the TAPs this
	// process made or checked, which Attach need not touch again.
	warm       []Link
	warmTarget int
	made       map[string]bool
	warmKick   chan struct{}
	denyKick   chan struct{}
	done       chan struct{}
	warmWG     sync.WaitGroup
	refreshWG  sync.WaitGroup
	// ns is the network namespace Open ran in: a TAP is made in the
	// namespace of the thread that makes it, so keepWarm's thread enters it.
	ns netns.NsHandle
}

type guestNet struct {
	link        Link
	egressDeny  bool
	allow, deny []sandbox.Rule
	rates       Rates
}

// Open checks the host, installs the base ruleset (replacing any left by an
// earlier run), turns IPv4 forwarding on and starts the DNS forwarder.
// Guests are added back by Attach; TAPs no guest claims are removed by Sweep.
func Open(ctx context.Context, cfg Config) (*Manager, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	// One netlink handle and one nftables connection, opened here: they stay
	// in the network namespace Open ran in, whatever thread calls later.
	nl, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("network: netlink: %w", err)
	}
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("network: own namespace: %w", err)
	}
	cidr := cfg.CIDR
	if cidr == "" {
		routes, err := hostRoutes(nl)
		if err != nil {
			return nil, fmt.Errorf("network: read routes: %w", err)
		}
		if cidr, err = ChoosePool(DefaultPoolCandidates, routes); err != nil {
			return nil, err
		}
	}
	pool, err := NewPool(cidr)
	if err != nil {
		return nil, err
	}
	uplink := cfg.Uplink
	if uplink == "" {
		if uplink, err = defaultUplink(nl); err != nil {
			return nil, fmt.Errorf("network: default route: %w", err)
		}
	}
	var ups []string
	for _, u := range cfg.Upstreams {
		if _, _, err := net.SplitHostPort(u); err != nil {
			u = net.JoinHostPort(u, "53") // a bare address: the DNS port
		}
		ups = append(ups, u)
	}
	if len(ups) == 0 {
		b, _ := os.ReadFile("/etc/resolv.conf")
		ups = ResolvConfServers(string(b))
	}
	blocked, err := BlockedSpans(pool.Prefix(), cfg.AllowRanges)
	if err != nil {
		return nil, err
	}
	dnsLimits := cfg.DNS
	if dnsLimits.Workers <= 0 {
		dnsLimits.Workers = DefaultDNSWorkers
	}
	m := &Manager{log: log, nl: nl, pool: pool, uplink: uplink, guests: map[netip.Addr]*guestNet{},
		made: map[string]bool{}, warmKick: make(chan struct{}, 1), denyKick: make(chan struct{}, 1), done: make(chan struct{}), ns: ns, rates: cfg.Rates, dns: dnsLimits}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return nil, fmt.Errorf("network: enable forwarding: %w", err)
	}
	if m.rs, err = installBase(pool.Prefix(), uplink, blocked); err != nil {
		return nil, err
	}
	m.fwd = newForwarder(log, ups, dnsLimits, m.enterNamespace, m.decide, m.learn)
	m.refreshWG.Add(1)
	go m.refreshDenied()
	log.Info("network", "pool", pool.Prefix(), "uplink", uplink, "dns_upstreams", ups,
		"dns_rate", dnsLimits.Rate, "dns_workers", dnsLimits.Workers, "rate_bytes", cfg.Rates.Bytes, "rate_packets", cfg.Rates.Packets)
	return m, nil
}

// BlockedSpans is DefaultBlocked plus the pool, minus what the operator allows.
func BlockedSpans(pool netip.Prefix, allowRanges []string) ([]span, error) {
	var base []netip.Prefix
	for _, s := range DefaultBlocked {
		base = append(base, netip.MustParsePrefix(s))
	}
	base = append(base, pool)
	var cut []netip.Prefix
	for _, s := range allowRanges {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil || !p.Addr().Is4() {
			return nil, fmt.Errorf("ZEISH_NET_ALLOW_RANGES: %q is not an IPv4 CIDR", s)
		}
		if p.Overlaps(pool) {
			return nil, fmt.Errorf("ZEISH_NET_ALLOW_RANGES: %s overlaps the guests' pool %s", p, pool)
		}
		cut = append(cut, p)
	}
	return subtractSpans(mergeSpans(base), mergeSpans(cut)), nil
}

// Rates are the node's default (and most) rates per guest.
func (m *Manager) Rates() Rates { return m.rates }

// Pool is the CIDR guests' links come from.
func (m *Manager) Pool() netip.Prefix { return m.pool.Prefix() }

// Allocate takes a free link for a new sandbox, a ready one when there is
// (StartWarm); its firewall comes with Attach.
func (m *Manager) Allocate() (Link, error) {
	if l, ok := m.takeWarm(); ok {
		m.kickWarm()
		return l, nil
	}
	return m.pool.Allocate()
}

// LinkOf is the link of a guest address.
func (m *Manager) LinkOf(guest string) (Link, error) {
	a, err := netip.ParseAddr(guest)
	if err != nil {
		return Link{}, err
	}
	return m.pool.LinkOf(a)
}

// Attach makes (or completes, after a restart) the TAP and firewall of the
// guest at address guest with policy p, and reserves its link.
func (m *Manager) Attach(guest string, p sandbox.Network) (Link, error) {
	a, err := netip.ParseAddr(guest)
	if err != nil {
		return Link{}, err
	}
	l, err := m.pool.Reserve(a)
	if err != nil {
		return Link{}, err
	}
	m.mu.Lock()
	made := m.made[l.TAP]
	m.mu.Unlock()
	if !made {
		if err := ensureTAP(m.nl, l); err != nil {
			return Link{}, err
		}
		m.mu.Lock()
		m.made[l.TAP] = true
		m.mu.Unlock()
	}
	// The guest's forwarder socket first: its port goes into its rules.
	opened := false
	if m.fwd.guest(l.TAP) == nil {
		if err := m.inNamespace(func() error { _, err := m.fwd.openGuest(l); return err }); err != nil {
			return Link{}, err
		}
		opened = true
	}
	g := compile(l, p, m.rates)
	if err := m.rs.setGuest(l.TAP, m.kernel(g), !m.rs.hasGuest(l.TAP)); err != nil {
		if opened {
			m.fwd.closeGuest(l.TAP)
		}
		return Link{}, err
	}
	m.mu.Lock()
	m.guests[a] = g
	m.mu.Unlock()
	m.blockDeniedNames(g)
	return l, nil
}

// SetPolicy replaces a guest's egress policy; connections open to addresses
// the new policy denies are cut, others carry on.
func (m *Manager) SetPolicy(guest string, p sandbox.Network) error {
	a, err := netip.ParseAddr(guest)
	if err != nil {
		return err
	}
	l, err := m.pool.LinkOf(a)
	if err != nil {
		return err
	}
	g := compile(l, p, m.rates)
	if err := m.rs.setGuest(l.TAP, m.kernel(g), !m.rs.hasGuest(l.TAP)); err != nil {
		return err
	}
	m.mu.Lock()
	m.guests[a] = g
	m.mu.Unlock()
	m.blockDeniedNames(g)
	return nil
}

// Detach removes a guest's firewall and TAP and frees its link; a guest
// that has none (never attached, or detached already) is fine.
func (m *Manager) Detach(guest string) error {
	a, err := netip.ParseAddr(guest)
	if err != nil {
		return err
	}
	l, err := m.pool.LinkOf(a)
	if err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.guests, a)
	delete(m.made, l.TAP)
	m.mu.Unlock()
	m.fwd.closeGuest(l.TAP)
	err = errors.Join(m.rs.delGuest(l.TAP), deleteTAP(m.nl, l.TAP))
	if err == nil {
		m.pool.Release(a)
	}
	return err
}

// Sweep removes every zeishd TAP that no attached guest has: left by a
// crash between a delete's steps, or by sandboxes gone while zeishd was down.
func (m *Manager) Sweep() error {
	taps, err := listTAPs(m.nl)
	if err != nil {
		return err
	}
	m.mu.Lock()
	keep := map[string]bool{}
	for _, g := range m.guests {
		keep[g.link.TAP] = true
	}
	for _, l := range m.warm {
		keep[l.TAP] = true
	}
	m.mu.Unlock()
	var errs []error
	for _, t := range taps {
		if !keep[t] {
			m.log.Info("network: removing leftover tap", "tap", t)
			m.fwd.closeGuest(t)
			errs = append(errs, m.rs.delGuest(t), deleteTAP(m.nl, t))
		}
	}
	return errors.Join(errs...)
}

// Close stops the DNS forwarder. The ruleset and TAPs stay while guests
// exist: their VMs outlive zeishd and must stay isolated meanwhile; with no
// guest left the table is removed too.
func (m *Manager) Close() error {
	close(m.done)
	m.warmWG.Wait() // no ready link is being made any more
	m.refreshWG.Wait()
	m.fwd.close()
	m.mu.Lock()
	n := len(m.guests)
	warm := m.warm
	m.warm = nil
	m.mu.Unlock()
	var err error
	for _, l := range warm {
		err = errors.Join(err, deleteTAP(m.nl, l.TAP))
	}
	if n == 0 {
		err = errors.Join(err, m.rs.removeTable())
	}
	m.nl.Close()
	m.ns.Close()
	return err
}

func (m *Manager) decide(src netip.Addr, name string) dnsVerdict {
	m.mu.Lock()
	g := m.guests[src]
	m.mu.Unlock()
	if g == nil {
		return dnsVerdict{}
	}
	v := dnsVerdict{known: true}
	for _, r := range g.deny {
		if r.Matches(name) {
			v.refuse = true
			if !g.egressDeny {
				v.denyTo = g.link.TAP
			}
			return v
		}
	}
	if g.egressDeny {
		for _, r := range g.allow {
			if r.Matches(name) {
				v.learnTo = g.link.TAP
				return v
			}
		}
		// Under egress deny only allowed names are asked upstream: a query
		// is itself traffic out (data can ride in the name), so any other
		// name is refused here and never leaves the node.
		v.refuse = true
	}
	return v
}

func (m *Manager) learn(tap string, allow bool, addrs []netip.Addr, ttl time.Duration) error {
	return m.rs.learn(tap, allow, addrs, ttl)
}

// kernel is g's policy as nftables takes it, with its forwarder port.
func (m *Manager) kernel(g *guestNet) compiled {
	c := g.kernel()
	c.guest, c.dnsRate = g.link.Guest, m.dns.Rate
	if dg := m.fwd.guest(g.link.TAP); dg != nil {
		c.dnsPort = dg.port
	}
	return c
}

func compile(l Link, p sandbox.Network, def Rates) *guestNet {
	g := &guestNet{link: l, egressDeny: p.Egress == sandbox.EgressDeny,
		rates: Rates{Bytes: rateOf(p.RateBytes, def.Bytes), Packets: rateOf(p.RatePackets, def.Packets)}}
	for _, r := range sandbox.Rules(p.Allow) {
		g.allow = append(g.allow, r)
	}
	for _, r := range sandbox.Rules(p.Deny) {
		g.deny = append(g.deny, r)
	}
	return g
}

// kernel is the CIDR part of the policy, which nftables enforces directly.
func (g *guestNet) kernel() compiled {
	var allow, deny []netip.Prefix
	for _, r := range g.allow {
		if r.Domain == "" {
			allow = append(allow, r.Prefix)
		}
	}
	for _, r := range g.deny {
		if r.Domain == "" {
			deny = append(deny, r.Prefix)
		}
	}
	return compiled{deny: g.egressDeny, allow: mergeSpans(allow), den: mergeSpans(deny), rates: g.rates}
}
