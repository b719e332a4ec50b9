package zeish

import (
	"context"
	"net/http"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
)

type (
	NetworkRequest       = api.NetworkRequest
	NetworkPolicyRequest = api.NetworkPolicyRequest
	Network              = sandbox.Network
)

// Egress values of a network policy.
const (
	EgressAllow = sandbox.EgressAllow
	EgressDeny  = sandbox.EgressDeny
)

// SetNetwork changes a sandbox's egress policy while it runs: each field of
// req that is set replaces the sandbox's (nil lists are kept, empty ones
// cleared). A bad rule changes nothing (invalid_argument).
func (c *Client) SetNetwork(ctx context.Context, id string, req NetworkPolicyRequest) (Sandbox, error) {
	var sb Sandbox
	err := c.call(ctx, c.control(http.MethodPatch, sandboxPath(id, "/network"), req), &sb)
	return sb, err
}
