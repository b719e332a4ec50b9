package sandbox

import (
	"reflect"
	"testing"
)

// A live network change replaces only the fields it gives (docs/network.md:
// PATCH …/network), and a bad one is refused whole.
func TestNetworkChangeApply(t *testing.T) {
	rate := func(v int64) *int64 { return &v }
	cur := &Network{Enabled: true, Egress: EgressAllow, Allow: []string{}, Deny: []string{"10.9.0.0/16"}, RateBytes: 1 << 20}
	cases := []struct {
		name string
		cur  *Network
		ch   NetworkChange
		want Network
		bad  bool
	}{
		{"egress only keeps the lists and caps", cur, NetworkChange{Egress: EgressDeny},
			Network{Enabled: true, Egress: EgressDeny, Allow: []string{}, Deny: []string{"10.9.0.0/16"}, RateBytes: 1 << 20}, false},
		{"an empty list clears it", cur, NetworkChange{Deny: []string{}},
			Network{Enabled: true, Egress: EgressAllow, Allow: []string{}, Deny: []string{}, RateBytes: 1 << 20}, false},
		{"a zero rate is the node's default", cur, NetworkChange{RateBytes: rate(0)},
			Network{Enabled: true, Egress: EgressAllow, Allow: []string{}, Deny: []string{"10.9.0.0/16"}}, false},
		{"no policy yet", nil, NetworkChange{Allow: []string{"example.com"}},
			Network{Enabled: true, Egress: EgressAllow, Allow: []string{"example.com"}, Deny: []string{}}, false},
		{"a bad rule refuses the whole change", cur, NetworkChange{Egress: EgressDeny, Allow: []string{"not a rule!"}}, Network{}, true},
		{"a bad egress", cur, NetworkChange{Egress: "sometimes"}, Network{}, true},
	}
	for _, c := range cases {
		got, err := c.ch.Apply(c.cur)
		if c.bad {
			if err == nil {
				t.Errorf("%s: applied %+v, want an error", c.name, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	if len(cur.Deny) != 1 || cur.Egress != EgressAllow {
		t.Errorf("Apply changed the current policy: %+v", cur)
	}
}
