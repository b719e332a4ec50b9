package zeish

import (
	"context"
	"net/http"
	"time"

	"github.com/zeish/zeish/api"
)

// TimeoutRequest moves a sandbox's deadline (see SetTimeout).
type TimeoutRequest = api.TimeoutRequest

// What happens to a sandbox when its timeout passes (CreateSandboxRequest's
// and TimeoutRequest's OnTimeout).
const (
	OnTimeoutDelete = "delete"
	OnTimeoutPause  = "pause"
	OnTimeoutStop   = "stop"
)

// SetTimeout makes the sandbox's time up d from now (0: never), after which
// it is deleted, paused or stopped as its OnTimeout says; onTimeout, when not
// empty, replaces that. It returns the sandbox with its new TimeoutAt.
func (c *Client) SetTimeout(ctx context.Context, id string, d time.Duration, onTimeout string) (Sandbox, error) {
	var sb Sandbox
	req := TimeoutRequest{TimeoutSeconds: int((d + time.Second - 1) / time.Second), OnTimeout: onTimeout}
	err := c.call(ctx, c.control(http.MethodPost, sandboxPath(id, "/timeout"), req), &sb)
	return sb, err
}
