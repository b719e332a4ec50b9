package network

import (
	"net/netip"
	"slices"
	"testing"
)

func TestPoolAllocateReserveRelease(t *testing.T) {
	p, err := NewPool("10.213.0.0/29") // two links
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.Allocate()
	b, _ := p.Allocate()
	if _, err := p.Allocate(); err != ErrPoolExhausted {
		t.Fatalf("third allocate: %v, want exhausted", err)
	}
	want := []Link{
		{TAP: "zt-0", Gateway: netip.MustParseAddr("10.213.0.1"), Guest: netip.MustParseAddr("10.213.0.2"), Bits: 30},
		{TAP: "zt-1", Gateway: netip.MustParseAddr("10.213.0.5"), Guest: netip.MustParseAddr("10.213.0.6"), Bits: 30},
	}
	if a != want[0] || b != want[1] {
		t.Fatalf("links %+v %+v, want %+v", a, b, want)
	}
	if a.GuestCIDR() != "10.213.0.2/30" {
		t.Fatalf("guest cidr %s", a.GuestCIDR())
	}
	p.Release(a.Guest)
	if c, err := p.Allocate(); err != nil || c != a {
		t.Fatalf("after release: %+v %v", c, err)
	}
	for _, bad := range []string{"10.213.0.1", "10.213.0.3", "10.214.0.2"} {
		if _, err := p.Reserve(netip.MustParseAddr(bad)); err == nil {
			t.Errorf("reserve %s: no error", bad)
		}
	}
}

func TestNewPoolRejects(t *testing.T) {
	for _, c := range []string{"", "10.0.0.0/30", "fd00::/64", "nonsense"} {
		if _, err := NewPool(c); err == nil {
			t.Errorf("NewPool(%q): no error", c)
		}
	}
}

func TestChoosePool(t *testing.T) {
	routes := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("10.0.0.0/8")}
	got, err := ChoosePool(DefaultPoolCandidates, routes)
	if err != nil || got != "172.29.0.0/16" {
		t.Fatalf("got %q %v: the default route must not count, 10/8 must", got, err)
	}
	if _, err := ChoosePool([]string{"10.1.0.0/16"}, routes); err == nil {
		t.Fatal("no error when every candidate clashes")
	}
}

func TestBlockedSpans(t *testing.T) {
	pool := netip.MustParsePrefix("10.213.0.0/16")
	tests := []struct {
		allow []string
		in    []string // must be blocked
		out   []string // must not
	}{
		{nil, []string{"10.1.2.3", "169.254.169.254", "192.168.1.1", "100.64.0.1", "172.16.0.1", "127.0.0.1", "224.0.0.1", "255.255.255.255",
			"168.63.129.16", "198.18.0.1", "198.19.255.255"}, // Azure's WireServer; the benchmarking range
			[]string{"8.8.8.8", "1.1.1.1", "168.63.129.15", "168.63.129.17", "198.17.255.255", "198.20.0.0"}},
		// The tests' fake internet is opened explicitly; the rest stays shut.
		{[]string{"198.18.0.0/15"}, []string{"168.63.129.16", "192.168.1.1", "169.254.169.254"}, []string{"198.18.5.5", "198.19.0.1"}},
		{[]string{"192.168.7.0/24"}, []string{"192.168.6.1", "192.168.8.1"}, []string{"192.168.7.9"}},
	}
	for _, tc := range tests {
		ss, err := BlockedSpans(pool, tc.allow)
		if err != nil {
			t.Fatal(err)
		}
		has := func(a string) bool {
			v := u32(netip.MustParseAddr(a))
			return slices.ContainsFunc(ss, func(s span) bool { return s.lo <= v && v <= s.hi })
		}
		for _, a := range tc.in {
			if !has(a) {
				t.Errorf("allow %v: %s not blocked", tc.allow, a)
			}
		}
		for _, a := range tc.out {
			if has(a) {
				t.Errorf("allow %v: %s blocked", tc.allow, a)
			}
		}
	}
	if _, err := BlockedSpans(pool, []string{"10.213.1.0/24"}); err == nil {
		t.Error("allowing a range inside the pool: no error")
	}
	if _, err := BlockedSpans(pool, []string{"bad"}); err == nil {
		t.Error("bad range: no error")
	}
}

func TestMergeSpans(t *testing.T) {
	ps := []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24"), netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("10.0.0.128/25"), netip.MustParsePrefix("255.255.255.0/24")}
	got := mergeSpans(ps)
	want := []span{{u32(netip.MustParseAddr("10.0.0.0")), u32(netip.MustParseAddr("10.0.1.255"))}, {u32(netip.MustParseAddr("255.255.255.0")), ^uint32(0)}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
	if els := intervalElements(got); len(els) != 3 {
		t.Fatalf("a range to the top has no end element: %d elements", len(els))
	}
}

func TestResolvConfServers(t *testing.T) {
	got := ResolvConfServers("# c\nnameserver 10.0.0.2\nsearch x\nnameserver fe80::1%eth0\nnameserver bad\n")
	if !slices.Equal(got, []string{"10.0.0.2:53", "[fe80::1]:53"}) {
		t.Fatalf("got %v", got)
	}
}
