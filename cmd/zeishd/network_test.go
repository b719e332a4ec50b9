package main

import (
	"testing"

	"github.com/zeish/zeish/internal/network"
)

func TestRatesFromEnv(t *testing.T) {
	tests := []struct {
		env     map[string]string
		want    network.Rates
		wantErr bool
	}{
		{env: nil, want: network.Rates{Bytes: defaultRateBytes, Packets: defaultRatePackets}},
		{env: map[string]string{"ZEISH_NET_RATE_BYTES": "1048576", "ZEISH_NET_RATE_PACKETS": "0"}, want: network.Rates{Bytes: 1 << 20}},
		{env: map[string]string{"ZEISH_NET_RATE_BYTES": "0"}, want: network.Rates{Packets: defaultRatePackets}},
		{env: map[string]string{"ZEISH_NET_RATE_BYTES": "100"}, wantErr: true},
		{env: map[string]string{"ZEISH_NET_RATE_BYTES": "1mb"}, wantErr: true},
		{env: map[string]string{"ZEISH_NET_RATE_PACKETS": "-5"}, wantErr: true},
	}
	for _, tc := range tests {
		got, err := ratesFromEnv(func(k string) string { return tc.env[k] })
		if (err != nil) != tc.wantErr || (err == nil && got != tc.want) {
			t.Errorf("%v: %+v %v, want %+v (error %v)", tc.env, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestDNSLimitsFromEnv(t *testing.T) {
	def := network.DNSLimits{Rate: network.DefaultDNSRate, Workers: network.DefaultDNSWorkers}
	tests := []struct {
		env     map[string]string
		want    network.DNSLimits
		wantErr bool
	}{
		{env: nil, want: def},
		{env: map[string]string{"ZEISH_DNS_RATE": "0"}, want: network.DNSLimits{Workers: network.DefaultDNSWorkers}},
		{env: map[string]string{"ZEISH_DNS_RATE": "20", "ZEISH_DNS_WORKERS": "8"}, want: network.DNSLimits{Rate: 20, Workers: 8}},
		{env: map[string]string{"ZEISH_DNS_RATE": "-1"}, wantErr: true},
		{env: map[string]string{"ZEISH_DNS_RATE": "fast"}, wantErr: true},
		{env: map[string]string{"ZEISH_DNS_WORKERS": "0"}, wantErr: true},
	}
	for _, tc := range tests {
		got, err := dnsLimitsFromEnv(func(k string) string { return tc.env[k] })
		if (err != nil) != tc.wantErr || (err == nil && got != tc.want) {
			t.Errorf("%v: %+v %v, want %+v (error %v)", tc.env, got, err, tc.want, tc.wantErr)
		}
	}
}
