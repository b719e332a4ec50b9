package main

import (
	"context"
	"log/slog"

	"github.com/zeish/zeish/internal/config"
	"github.com/zeish/zeish/internal/network"
)

// openNetwork sets up guest networking, or returns nil when it is off
// (ZEISH_NET=off, the default when not root: TAPs and nftables need it).
func openNetwork(ctx context.Context, log *slog.Logger, cfg *config.Config) (*network.Manager, error) {
	if !cfg.Net {
		log.Info("network: off; sandboxes get no way out")
		return nil, nil
	}
	return network.Open(ctx, network.Config{
		CIDR:        cfg.NetCIDR,
		Uplink:      cfg.Uplink,
		Upstreams:   cfg.DNSUpstream,
		AllowRanges: cfg.NetAllowRanges,
		Rates:       network.Rates{Bytes: cfg.NetRateBytes, Packets: cfg.NetRatePackets},
		DNS:         network.DNSLimits{Rate: cfg.DNSRate, Workers: cfg.DNSWorkers},
		Logger:      log,
	})
}
