package network

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
)

// Every sandbox gets its own /30 out of the pool: the network address, the
// gateway (the host's end, on the TAP), the guest, and the broadcast address.
// A routed point-to-point link per guest means no bridge, so guests never
// share a broadcast domain and cannot see each other's frames.
const (
	slotBits  = 2
	slotSize  = 1 << slotBits
	linkBits  = 32 - slotBits
	tapPrefix = "zt-" // every link zeishd owns; nothing else may use it
)

// ErrPoolExhausted: every /30 of the pool is in use.
var ErrPoolExhausted = errors.New("address pool exhausted")

// Link is one guest's routed link.
type Link struct {
	TAP     string     // host-side device, tapPrefix + slot
	Gateway netip.Addr // host side: the guest's default route and DNS server
	Guest   netip.Addr
	Bits    int // prefix length of the link (30)
}

// GuestCIDR is the guest's address with the link's prefix, as the guest sets it.
func (l Link) GuestCIDR() string { return netip.PrefixFrom(l.Guest, l.Bits).String() }

// Pool hands out links from a CIDR. It keeps only what is in use in memory;
// the store (the sandboxes' addresses) is the truth, replayed by Reserve
// after a restart.
type Pool struct {
	prefix netip.Prefix
	slots  uint32

	mu   sync.Mutex
	used map[uint32]bool
	next uint32 // where the search for a free slot starts: recently freed slots are reused last
}

// NewPool makes a pool over cidr, which must be IPv4 and hold at least two links.
func NewPool(cidr string) (*Pool, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() {
		return nil, fmt.Errorf("network pool %q: want an IPv4 CIDR", cidr)
	}
	if p.Bits() > 32-slotBits-1 {
		return nil, fmt.Errorf("network pool %q: too small (want /29 or larger)", cidr)
	}
	p = p.Masked()
	return &Pool{prefix: p, slots: 1 << (linkBits - p.Bits()), used: map[uint32]bool{}}, nil
}

// Prefix is the pool's CIDR.
func (p *Pool) Prefix() netip.Prefix { return p.prefix }

// Allocate takes a free link.
func (p *Pool) Allocate() (Link, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := uint32(0); i < p.slots; i++ {
		s := (p.next + i) % p.slots
		if !p.used[s] {
			p.used[s] = true
			p.next = (s + 1) % p.slots
			return p.link(s), nil
		}
	}
	return Link{}, ErrPoolExhausted
}

// Reserve marks the link of a guest address in use (after a restart); it is
// fine to reserve a link twice.
func (p *Pool) Reserve(guest netip.Addr) (Link, error) {
	s, err := p.slotOf(guest)
	if err != nil {
		return Link{}, err
	}
	p.mu.Lock()
	p.used[s] = true
	p.mu.Unlock()
	return p.link(s), nil
}

// Release frees the link of a guest address.
func (p *Pool) Release(guest netip.Addr) {
	if s, err := p.slotOf(guest); err == nil {
		p.mu.Lock()
		delete(p.used, s)
		p.mu.Unlock()
	}
}

// LinkOf is the link a guest address belongs to.
func (p *Pool) LinkOf(guest netip.Addr) (Link, error) {
	s, err := p.slotOf(guest)
	if err != nil {
		return Link{}, err
	}
	return p.link(s), nil
}

// InUse is how many links are taken.
func (p *Pool) InUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.used)
}

func (p *Pool) slotOf(guest netip.Addr) (uint32, error) {
	if !guest.Is4() || !p.prefix.Contains(guest) {
		return 0, fmt.Errorf("address %s is not in the pool %s", guest, p.prefix)
	}
	off := u32(guest) - u32(p.prefix.Addr())
	if off%slotSize != 2 {
		return 0, fmt.Errorf("address %s is not a guest address of the pool %s", guest, p.prefix)
	}
	return off / slotSize, nil
}

func (p *Pool) link(s uint32) Link {
	base := u32(p.prefix.Addr()) + s*slotSize
	return Link{
		TAP:     tapPrefix + strconv.FormatUint(uint64(s), 10),
		Gateway: addr4(base + 1),
		Guest:   addr4(base + 2),
		Bits:    32 - slotBits,
	}
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func addr4(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// DefaultPoolCandidates are tried in order by ChoosePool: the first that
// overlaps none of the host's routes becomes the pool.
var DefaultPoolCandidates = []string{"10.213.0.0/16", "10.231.0.0/16", "172.29.0.0/16", "10.123.0.0/16", "192.168.213.0/24"}

// ChoosePool returns the first candidate that overlaps no route the host has.
func ChoosePool(candidates []string, routes []netip.Prefix) (string, error) {
	for _, c := range candidates {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return "", err
		}
		clash := false
		for _, r := range routes {
			if r.Bits() > 0 && r.Overlaps(p) {
				clash = true
				break
			}
		}
		if !clash {
			return c, nil
		}
	}
	return "", fmt.Errorf("every default address pool overlaps a route of this host; set ZEISH_NET_CIDR")
}
