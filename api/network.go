package api

import "github.com/zeish/zeish/sandbox"

// NetworkRequest is the network part of a create or a fork. Omitted: a
// network card with egress allow (a fork: its parent's policy).
type NetworkRequest struct {
	Enabled *bool          `json:"enabled,omitempty"` // default true; false: no network card at all
	Egress  sandbox.Egress `json:"egress,omitempty"`  // allow (default) or deny
	Allow   []string       `json:"allow,omitempty"`   // IPv4 addresses, CIDRs, domains, *.domains
	Deny    []string       `json:"deny,omitempty"`
	// Caps per second, each way; 0 or left out: the node's default, which
	// is also the most a sandbox may have.
	RateBytes   int64 `json:"rate_bytes_per_second,omitempty"`
	RatePackets int64 `json:"rate_packets_per_second,omitempty"`
}

// NetworkPolicyRequest is PATCH /public/sandboxes/{id}/network: each field
// given replaces the sandbox's; a field left out is kept.
type NetworkPolicyRequest struct {
	Egress sandbox.Egress `json:"egress,omitempty"`
	Allow  []string       `json:"allow"`
	Deny   []string       `json:"deny"`
	// RateBytes and RatePackets replace the caps when given (0: the node's default).
	RateBytes   *int64 `json:"rate_bytes_per_second,omitempty"`
	RatePackets *int64 `json:"rate_packets_per_second,omitempty"`
}
