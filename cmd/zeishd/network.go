package main

import (
	"context"
	"log/slog"
	"os"
	"strings"

	"github.com/zeish/zeish/internal/network"
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
	return network.Open(ctx, network.Config{
		CIDR:        os.Getenv("ZEISH_NET_CIDR"),
		Uplink:      os.Getenv("ZEISH_UPLINK"),
		Upstreams:   list(os.Getenv("ZEISH_DNS_UPSTREAM")),
		AllowRanges: list(os.Getenv("ZEISH_NET_ALLOW_RANGES")),
		Logger:      log,
	})
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
