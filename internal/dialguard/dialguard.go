// Package dialguard refuses outgoing connections into blocked address
// ranges (loopback, private networks, link-local, the host's own networks).
// The check runs on the address each connection is actually dialled to,
// after name resolution and for every address tried, so neither a name
// that resolves into a blocked range nor one that resolves differently
// between a check and the dial (DNS rebinding) gets through.
package dialguard

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// ErrBlocked says an address is in a blocked range.
var ErrBlocked = errors.New("address in a blocked range")

// BlockedIPv6 are the IPv6 ranges a guard refuses beside the IPv4 ones its
// caller names (IPv4-mapped addresses are checked as IPv4): unspecified,
// loopback, NAT64 (it reaches IPv4 addresses), discard, IETF protocol
// assignments (Teredo), documentation, 6to4, unique local, link-local,
// site-local and multicast.
var BlockedIPv6 = []string{
	"::/128", "::1/128", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32",
	"2002::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
}

// Guard decides which addresses may be dialled.
type Guard struct {
	blocked []netip.Prefix
	allowed []netip.Prefix
}

// New makes a guard that refuses blocked and BlockedIPv6, except what
// allowed opens (CIDRs, IPv4 or IPv6).
func New(blocked, allowed []string) (*Guard, error) {
	g := &Guard{}
	for _, s := range append(append([]string{}, blocked...), BlockedIPv6...) {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("blocked range %q: %v", s, err)
		}
		g.blocked = append(g.blocked, p.Masked())
	}
	for _, s := range allowed {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("allowed range %q is not a CIDR: %v", s, err)
		}
		g.allowed = append(g.allowed, p.Masked())
	}
	return g, nil
}

// Check refuses an address in a blocked range that no allowed range opens.
func (g *Guard) Check(a netip.Addr) error {
	a = a.Unmap().WithZone("")
	for _, p := range g.allowed {
		if p.Contains(a) {
			return nil
		}
	}
	if a.IsUnspecified() {
		return fmt.Errorf("%s: %w", a, ErrBlocked)
	}
	for _, p := range g.blocked {
		if p.Contains(a) {
			return fmt.Errorf("%s is in %s: %w", a, p, ErrBlocked)
		}
	}
	return nil
}

// Control is a net.Dialer's Control: it sees the resolved address of each
// connection just before connect(2).
func (g *Guard) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s %q: not an address: %w", network, address, ErrBlocked)
	}
	return g.Check(ap.Addr())
}

// Dialer dials TCP through the guard.
func (g *Guard) Dialer() *net.Dialer {
	return &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: g.Control}
}

// Transport is an HTTP transport whose every connection passes the guard.
// It uses no proxy: through one, the guard would see only the proxy's
// address, never the host a request names. A server that accepts a
// connection but sends no response headers within a minute is given up on.
func (g *Guard) Transport() *http.Transport {
	return &http.Transport{
		DialContext:           g.Dialer().DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   50,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: time.Minute,
		ExpectContinueTimeout: time.Second,
	}
}
