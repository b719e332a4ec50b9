package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/zeish/zeish/internal/network"
	"github.com/zeish/zeish/sandbox"
)

// openNetwork sets up guest networking from the environment, or returns nil
// when it is off (ZEISH_NET=off, or not root: TAPs and nftables need it).
func openNetwork(ctx context.Context, log *slog.Logger) (*network.Manager, error) {
	def := "on"
	if os.Geteuid() != 0 {
		def = "off"
	}
	if env("ZEISH_NET", def) == "off" {
		log.Info("network: off; sandboxes get no way out")
		return nil, nil
	}
	rates, err := ratesFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	dns, err := dnsLimitsFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	return network.Open(ctx, network.Config{
		CIDR:        os.Getenv("ZEISH_NET_CIDR"),
		Uplink:      os.Getenv("ZEISH_UPLINK"),
		Upstreams:   list(os.Getenv("ZEISH_DNS_UPSTREAM")),
		AllowRanges: list(os.Getenv("ZEISH_NET_ALLOW_RANGES")),
		Rates:       rates,
		DNS:         dns,
		Logger:      log,
	})
}

// Default per-sandbox rates, each way: 100 Mbit/s and 20,000 packets/s,
// a fair share of a node's uplink that no agent's package install notices.
const (
	defaultRateBytes   = 12_500_000
	defaultRatePackets = 20_000
)

// ratesFromEnv reads ZEISH_NET_RATE_BYTES and ZEISH_NET_RATE_PACKETS (per
// second; 0: uncapped).
func ratesFromEnv(lookup func(string) string) (network.Rates, error) {
	r := network.Rates{Bytes: defaultRateBytes, Packets: defaultRatePackets}
	for _, f := range []struct {
		name string
		dst  *int64
		min  int64
	}{{"ZEISH_NET_RATE_BYTES", &r.Bytes, sandbox.MinRateBytes}, {"ZEISH_NET_RATE_PACKETS", &r.Packets, 1}} {
		v := lookup(f.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > sandbox.MaxRate || (n > 0 && n < f.min) {
			return r, fmt.Errorf("%s=%q: want a rate per second, 0 (uncapped) or %d to %d", f.name, v, f.min, int64(sandbox.MaxRate))
		}
		*f.dst = n
	}
	return r, nil
}

// dnsLimitsFromEnv reads ZEISH_DNS_RATE (each sandbox's DNS queries per
// second; 0: uncapped) and ZEISH_DNS_WORKERS (the node's queries upstream
// at once).
func dnsLimitsFromEnv(lookup func(string) string) (network.DNSLimits, error) {
	l := network.DNSLimits{Rate: network.DefaultDNSRate, Workers: network.DefaultDNSWorkers}
	if v := lookup("ZEISH_DNS_RATE"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > 100_000 {
			return l, fmt.Errorf("ZEISH_DNS_RATE=%q: want queries per second per sandbox, 0 (uncapped) to 100000", v)
		}
		l.Rate = n
	}
	if v := lookup("ZEISH_DNS_WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 4096 {
			return l, fmt.Errorf("ZEISH_DNS_WORKERS=%q: want 1 to 4096 queries upstream at once", v)
		}
		l.Workers = n
	}
	return l, nil
}

// list splits a comma-separated setting, dropping empty items.
func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
