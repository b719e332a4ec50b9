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
