package sandbox

import (
	"slices"
	"testing"
)

func TestNetworkNormalize(t *testing.T) {
	tests := []struct {
		in      Network
		want    Network
		wantErr bool
	}{
		{in: Network{Enabled: true}, want: Network{Enabled: true, Egress: EgressAllow, Allow: []string{}, Deny: []string{}}},
		{in: Network{Enabled: true, Egress: EgressDeny, Allow: []string{"Example.COM.", "*.pypi.org", "10.1.2.3/8", "1.2.3.4", "1.2.3.4/32"}},
			want: Network{Enabled: true, Egress: EgressDeny, Allow: []string{"example.com", "*.pypi.org", "10.0.0.0/8", "1.2.3.4"}, Deny: []string{}}},
		{in: Network{Enabled: true, Deny: []string{"1.2.3.4/33"}}, wantErr: true},
		{in: Network{Enabled: true, Deny: []string{"300.1.1.1"}}, wantErr: true},
		{in: Network{Enabled: true, Deny: []string{"fd00::/8"}}, wantErr: true},
		{in: Network{Enabled: true, Allow: []string{"foo.*.com"}}, wantErr: true},
		{in: Network{Enabled: true, Allow: []string{"*example.com"}}, wantErr: true},
		{in: Network{Enabled: true, Allow: []string{"*.com"}}, wantErr: true},
		{in: Network{Enabled: true, Allow: []string{"a_b..com"}}, wantErr: true},
		{in: Network{Enabled: true, Allow: []string{"-a.com"}}, wantErr: true},
		{in: Network{Enabled: true, Allow: []string{""}}, wantErr: true},
		{in: Network{Enabled: true, Egress: "maybe"}, wantErr: true},
		{in: Network{Enabled: false, Egress: EgressDeny}, wantErr: true},
		{in: Network{Enabled: true, RateBytes: 1 << 20, RatePackets: 500},
			want: Network{Enabled: true, Egress: EgressAllow, Allow: []string{}, Deny: []string{}, RateBytes: 1 << 20, RatePackets: 500}},
		{in: Network{Enabled: true, RateBytes: -1}, wantErr: true},
		{in: Network{Enabled: true, RatePackets: -1}, wantErr: true},
		{in: Network{Enabled: true, RateBytes: 1000}, wantErr: true}, // below MinRateBytes
		{in: Network{Enabled: true, RateBytes: MaxRate + 1}, wantErr: true},
		{in: Network{Enabled: false, RateBytes: 1 << 20}, wantErr: true},
	}
	for _, tc := range tests {
		got, err := tc.in.Normalize()
		if (err != nil) != tc.wantErr {
			t.Errorf("%+v: err %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil && (got.Enabled != tc.want.Enabled || got.Egress != tc.want.Egress || !slices.Equal(got.Allow, tc.want.Allow) || !slices.Equal(got.Deny, tc.want.Deny)) {
			t.Errorf("%+v: got %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestRuleMatches(t *testing.T) {
	tests := []struct {
		rule, name string
		want       bool
	}{
		{"example.com", "example.com", true},
		{"example.com", "www.example.com", false},
		{"*.example.com", "www.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "badexample.com", false},
		{"10.0.0.0/8", "10.0.0.1", false},
	}
	for _, tc := range tests {
		r, err := ParseRule(tc.rule)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Matches(tc.name); got != tc.want {
			t.Errorf("%s matches %s: %v", tc.rule, tc.name, got)
		}
	}
}
