package zeish

import (
	"context"
	"net/http"

	"github.com/zeish/zeish/api"
)

// GitStatus is a sandbox's clone as git sees it: branch, HEAD, dirty files.
type GitStatus = api.GitStatus

// GitFile is one dirty file of a GitStatus.
type GitFile = api.GitFile

// GitStatus reads the clone of a sandbox created with a git repository
// (errdefs.ErrNoGitRepo for one without).
func (c *Client) GitStatus(ctx context.Context, id string) (GitStatus, error) {
	var st GitStatus
	err := c.call(ctx, c.control(http.MethodGet, sandboxPath(id, "/git"), nil), &st)
	return st, err
}
