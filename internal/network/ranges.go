package network

import (
	"net/netip"
	"slices"
)

// span is an inclusive IPv4 range; nftables interval sets take disjoint
// ranges only, so prefixes are merged (and subtracted) here first.
type span struct{ lo, hi uint32 }

func spanOf(p netip.Prefix) span {
	p = p.Masked()
	lo := u32(p.Addr())
	return span{lo, lo | (1<<(32-p.Bits()) - 1)}
}

// mergeSpans sorts and joins overlapping or adjacent prefixes.
func mergeSpans(ps []netip.Prefix) []span {
	var ss []span
	for _, p := range ps {
		if p.Addr().Is4() {
			ss = append(ss, spanOf(p))
		}
	}
	slices.SortFunc(ss, func(a, b span) int {
		switch {
		case a.lo < b.lo:
			return -1
		case a.lo > b.lo:
			return 1
		}
		return 0
	})
	var out []span
	for _, s := range ss {
		if n := len(out); n > 0 && (s.lo <= out[n-1].hi || out[n-1].hi != ^uint32(0) && s.lo == out[n-1].hi+1) {
			out[n-1].hi = max(out[n-1].hi, s.hi)
			continue
		}
		out = append(out, s)
	}
	return out
}

// subtractSpans removes cut from base (both merged).
func subtractSpans(base, cut []span) []span {
	var out []span
	for _, b := range base {
		parts := []span{b}
		for _, c := range cut {
			var next []span
			for _, p := range parts {
				if c.hi < p.lo || c.lo > p.hi {
					next = append(next, p)
					continue
				}
				if c.lo > p.lo {
					next = append(next, span{p.lo, c.lo - 1})
				}
				if c.hi < p.hi {
					next = append(next, span{c.hi + 1, p.hi})
				}
			}
			parts = next
		}
		out = append(out, parts...)
	}
	return out
}

// DefaultBlocked is what a guest never reaches unless the operator allows a
// range (ZEISH_NET_ALLOW_RANGES): "this network", RFC 1918, CGNAT, loopback,
// link-local (cloud metadata at 169.254.169.254), IETF protocol assignments,
// multicast and reserved space; Azure's WireServer (168.63.129.16, a host
// service every Azure VM reaches from a public address, which hands out the
// VM's provisioning data), and the benchmarking range 198.18.0.0/15 (RFC
// 2544: never on the internet, but used inside data centres and labs, as
// the tests' own fake internet is: they open it with ZEISH_NET_ALLOW_RANGES).
// The host's own addresses are refused separately (every packet from a
// guest to the host is dropped on input).
var DefaultBlocked = []string{
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "168.63.129.16/32", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
}
