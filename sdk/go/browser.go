package zeish

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/zeish/zeish/api"
)

// Browser is how to reach a sandbox's Chromium over the DevTools protocol.
type Browser = api.Browser

// Browser returns the DevTools endpoints of the sandbox's browser (created
// or forked with browser: true), with a data-plane token valid for ttl (0:
// the server's default). CDPURL carries the token; give it to chromedp
// (remote.NewAllocator), Puppeteer (browserWSEndpoint) or Playwright
// (connectOverCDP).
func (c *Client) Browser(ctx context.Context, id string, ttl time.Duration) (Browser, error) {
	var b Browser
	path := sandboxPath(id, "/browser")
	if ttl > 0 {
		path += fmt.Sprintf("?ttl_seconds=%d", int(ttl/time.Second))
	}
	err := c.call(ctx, c.control(http.MethodGet, path, nil), &b)
	return b, err
}
