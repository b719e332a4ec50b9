package mcp

import (
	"context"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

type SetNetworkInput struct {
	SandboxID string   `json:"sandbox_id" jsonschema:"sandbox whose egress policy to change (sbx_…)"`
	Egress    string   `json:"egress,omitempty" jsonschema:"allow: everything public except deny rules; deny: nothing except allow rules; omitted: unchanged"`
	Allow     []string `json:"allow,omitempty" jsonschema:"replaces the allow list: IPv4 addresses, CIDRs, domains (example.com) or *.example.com; omitted: unchanged"`
	Deny      []string `json:"deny,omitempty" jsonschema:"replaces the deny list (wins over allow); omitted: unchanged"`
	// Pointers: 0 is a value (the node's default), omitted is "unchanged".
	RateBytes   *int64 `json:"rate_bytes_per_second,omitempty" jsonschema:"cap on traffic in bytes per second, each way; 0: the node's default (also the most allowed); omitted: unchanged"`
	RatePackets *int64 `json:"rate_packets_per_second,omitempty" jsonschema:"cap in packets per second, each way; 0: the node's default; omitted: unchanged"`
}

type NetworkInfo struct {
	SandboxID string   `json:"sandbox_id" jsonschema:"the sandbox"`
	Address   string   `json:"address" jsonschema:"the guest's IPv4 address"`
	Egress    string   `json:"egress" jsonschema:"allow or deny: where traffic no rule names goes"`
	Allow     []string `json:"allow" jsonschema:"allowed destinations"`
	Deny      []string `json:"deny" jsonschema:"denied destinations"`
	// The caps that apply (set by the operator or at create), for an agent
	// that wonders why a download is slow.
	RateBytes   int64 `json:"rate_bytes_per_second,omitempty" jsonschema:"cap on the sandbox's traffic in bytes per second, each way; 0: none"`
	RatePackets int64 `json:"rate_packets_per_second,omitempty" jsonschema:"cap in packets per second, each way; 0: none"`
}

func (t *tools) addNetworkTools(s *sdkmcp.Server) {
	add(s, &sdkmcp.Tool{
		Name:  "set_network",
		Title: "Set network policy",
		Description: "Change which internet destinations a running sandbox may reach, and how fast, at once and without a restart. " +
			"Rules are IPv4 addresses, CIDRs, domains or *.domains; deny wins over allow; egress decides the rest. " +
			"Private ranges, the host and other sandboxes stay unreachable whatever the rules say.",
		Annotations: &sdkmcp.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, t.setNetwork)
}

func (t *tools) setNetwork(ctx context.Context, in SetNetworkInput) (NetworkInfo, error) {
	sb, err := t.client.SetNetwork(ctx, in.SandboxID, zeish.NetworkPolicyRequest{
		Egress: sandbox.Egress(in.Egress), Allow: in.Allow, Deny: in.Deny, RateBytes: in.RateBytes, RatePackets: in.RatePackets,
	})
	if err != nil {
		return NetworkInfo{}, err
	}
	out := NetworkInfo{SandboxID: sb.ID, Address: sb.Address, Allow: []string{}, Deny: []string{}}
	if n := sb.Network; n != nil {
		out.Egress, out.Allow, out.Deny = string(n.Egress), n.Allow, n.Deny
		out.RateBytes, out.RatePackets = n.RateBytes, n.RatePackets
	}
	return out, nil
}

// networkRequest is the network part of create_sandbox, nil when none is given.
func networkRequest(in CreateSandboxInput) *zeish.NetworkRequest {
	if in.Egress == "" && in.Allow == nil && in.Deny == nil && in.RateBytes == 0 && in.RatePackets == 0 {
		return nil
	}
	return &zeish.NetworkRequest{Egress: sandbox.Egress(in.Egress), Allow: in.Allow, Deny: in.Deny,
		RateBytes: in.RateBytes, RatePackets: in.RatePackets}
}
