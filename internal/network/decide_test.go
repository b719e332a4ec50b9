package network

import (
	"net/netip"
	"testing"

	"github.com/zeish/zeish/sandbox"
)

// TestDecide is the forwarder's verdict per guest policy and name: under
// egress deny only allowed names go upstream (DNS is a way out too).
func TestDecide(t *testing.T) {
	l := Link{TAP: "zt-0", Guest: netip.MustParseAddr("10.213.0.2")}
	tests := []struct {
		policy sandbox.Network
		name   string
		want   dnsVerdict
	}{
		{sandbox.Network{Egress: sandbox.EgressAllow}, "anything.example", dnsVerdict{known: true}},
		{sandbox.Network{Egress: sandbox.EgressAllow, Deny: []string{"bad.example"}}, "bad.example", dnsVerdict{known: true, refuse: true, denyTo: "zt-0"}},
		{sandbox.Network{Egress: sandbox.EgressAllow, Deny: []string{"*.bad.example"}}, "x.bad.example", dnsVerdict{known: true, refuse: true, denyTo: "zt-0"}},
		{sandbox.Network{Egress: sandbox.EgressDeny}, "secret-data.exfil.example", dnsVerdict{known: true, refuse: true}},
		{sandbox.Network{Egress: sandbox.EgressDeny, Allow: []string{"198.18.7.7"}}, "other.test", dnsVerdict{known: true, refuse: true}},
		{sandbox.Network{Egress: sandbox.EgressDeny, Allow: []string{"*.pypi.org"}}, "files.pypi.org", dnsVerdict{known: true, learnTo: "zt-0"}},
		{sandbox.Network{Egress: sandbox.EgressDeny, Allow: []string{"*.pypi.org"}}, "pypi.org.evil.example", dnsVerdict{known: true, refuse: true}},
		{sandbox.Network{Egress: sandbox.EgressDeny, Allow: []string{"*.pypi.org"}, Deny: []string{"x.pypi.org"}}, "x.pypi.org", dnsVerdict{known: true, refuse: true}},
	}
	for _, tc := range tests {
		m := &Manager{guests: map[netip.Addr]*guestNet{l.Guest: compile(l, tc.policy, Rates{})}}
		if got := m.decide(l.Guest, tc.name); got != tc.want {
			t.Errorf("%+v, %s: %+v, want %+v", tc.policy, tc.name, got, tc.want)
		}
	}
	if got := (&Manager{guests: map[netip.Addr]*guestNet{}}).decide(l.Guest, "x.example"); got.known {
		t.Errorf("a source that is no guest: %+v", got)
	}
}
