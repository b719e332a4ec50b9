package guest

import (
	"context"
	"fmt"
	"io"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest/desktop"
)

// maxScreenshot bounds the PNG a guest may send: a 3840x2160 screen of
// noise, uncompressed, plus headroom.
const maxScreenshot = 40 << 20

// ScreenshotInfo heads a screenshot's PNG bytes on the wire.
type ScreenshotInfo struct {
	Width  int   `json:"width"`
	Height int   `json:"height"`
	Size   int64 `json:"size"` // bytes of PNG
}

// DesktopAction performs one desktop action and reports the cursor's
// position after it. errdefs.ErrDesktopNotEnabled without a desktop.
func (c *Client) DesktopAction(ctx context.Context, a desktop.Action) (desktop.Result, error) {
	var res desktop.Result
	err := c.roundTrip(ctx, request{Op: opDesktop, Desktop: &a}, &res)
	return res, err
}

// DesktopStatus reports the desktop's display and size.
func (c *Client) DesktopStatus(ctx context.Context) (desktop.Status, error) {
	var st desktop.Status
	err := c.roundTrip(ctx, request{Op: opDesktopStatus}, &st)
	return st, err
}

// DesktopScreenshot returns the whole screen as a PNG.
func (c *Client) DesktopScreenshot(ctx context.Context) ([]byte, ScreenshotInfo, error) {
	cl, err := c.start(ctx, request{Op: opDesktopShot})
	if err != nil {
		return nil, ScreenshotInfo{}, err
	}
	defer cl.close()
	var info ScreenshotInfo
	if err := cl.result(&info); err != nil {
		return nil, ScreenshotInfo{}, err
	}
	if info.Size < 0 || info.Size > maxScreenshot {
		return nil, ScreenshotInfo{}, fmt.Errorf("guest screenshot of %d bytes: %w", info.Size, errdefs.ErrInternal)
	}
	b, err := io.ReadAll(io.LimitReader(&fileReader{cl: cl}, maxScreenshot+1))
	if err != nil {
		return nil, ScreenshotInfo{}, err
	}
	if int64(len(b)) != info.Size {
		return nil, ScreenshotInfo{}, fmt.Errorf("guest screenshot: %d bytes, announced %d: %w", len(b), info.Size, errdefs.ErrInternal)
	}
	return b, info, nil
}
