package zeish

import (
	"context"
	"io"
	"net/http"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/guest/desktop"
)

// The desktop of a sandbox created or forked with desktop: true.
type (
	DesktopAction       = api.DesktopAction
	DesktopActionResult = api.DesktopActionResult
	DesktopStatus       = api.DesktopStatus
)

// Desktop actions, as computer-use tools name them.
const (
	ActionScreenshot     = desktop.ActionScreenshot
	ActionCursorPosition = desktop.ActionCursorPosition
	ActionMouseMove      = desktop.ActionMouseMove
	ActionLeftClick      = desktop.ActionLeftClick
	ActionRightClick     = desktop.ActionRightClick
	ActionMiddleClick    = desktop.ActionMiddleClick
	ActionDoubleClick    = desktop.ActionDoubleClick
	ActionDrag           = desktop.ActionDrag
	ActionType           = desktop.ActionType
	ActionKey            = desktop.ActionKey
	ActionScroll         = desktop.ActionScroll
)

// Desktop reports the desktop of sandbox id: display, screen size, window
// manager. errdefs.ErrDesktopNotEnabled if it has none.
func (c *Client) Desktop(ctx context.Context, id string) (DesktopStatus, error) {
	var st DesktopStatus
	err := c.call(ctx, c.control(http.MethodGet, sandboxPath(id, "/desktop"), nil), &st)
	return st, err
}

// DesktopAction performs one action on the sandbox's desktop and reports the
// cursor's position after it (and, for a screenshot, the PNG). Bad input
// (an unknown action or key, coordinates off the screen: errdefs.ErrOffScreen)
// is refused before anything happens.
func (sc *SandboxConn) DesktopAction(ctx context.Context, a DesktopAction) (DesktopActionResult, error) {
	var res DesktopActionResult
	err := sc.call(ctx, request{method: http.MethodPost, json: a}, "/desktop/actions", &res)
	return res, err
}

// Screenshot returns the sandbox's screen as a PNG.
func (sc *SandboxConn) Screenshot(ctx context.Context) ([]byte, error) {
	body, err := sc.send(ctx, request{method: http.MethodGet, accept: "image/png"}, "/desktop/screenshot")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return io.ReadAll(body)
}

// MoveMouse moves the pointer to x, y.
func (sc *SandboxConn) MoveMouse(ctx context.Context, x, y int) (DesktopActionResult, error) {
	return sc.DesktopAction(ctx, DesktopAction{Action: ActionMouseMove, X: &x, Y: &y})
}

// Click clicks button ("left", "right", "middle", "double" for a left
// double click; "" is left) at x, y.
func (sc *SandboxConn) Click(ctx context.Context, x, y int, button string) (DesktopActionResult, error) {
	action := ActionLeftClick
	switch button {
	case "right":
		action = ActionRightClick
	case "middle":
		action = ActionMiddleClick
	case "double":
		action = ActionDoubleClick
	}
	return sc.DesktopAction(ctx, DesktopAction{Action: action, X: &x, Y: &y})
}

// Drag presses the left button at fromX, fromY, moves to toX, toY and
// releases it.
func (sc *SandboxConn) Drag(ctx context.Context, fromX, fromY, toX, toY int) (DesktopActionResult, error) {
	return sc.DesktopAction(ctx, DesktopAction{Action: ActionDrag, X: &fromX, Y: &fromY, ToX: &toX, ToY: &toY})
}

// TypeText types text into the focused window ("\n" presses Return).
func (sc *SandboxConn) TypeText(ctx context.Context, text string) (DesktopActionResult, error) {
	return sc.DesktopAction(ctx, DesktopAction{Action: ActionType, Text: text})
}

// PressKeys presses key combos such as "ctrl+c", "Return" or "ctrl+a Delete".
func (sc *SandboxConn) PressKeys(ctx context.Context, keys string) (DesktopActionResult, error) {
	return sc.DesktopAction(ctx, DesktopAction{Action: ActionKey, Keys: keys})
}

// Scroll turns the wheel amount clicks (0: 3) in direction (up, down, left,
// right) at x, y.
func (sc *SandboxConn) Scroll(ctx context.Context, x, y int, direction string, amount int) (DesktopActionResult, error) {
	return sc.DesktopAction(ctx, DesktopAction{Action: ActionScroll, X: &x, Y: &y, Direction: direction, Amount: amount})
}

// CursorPosition is where the pointer is.
func (sc *SandboxConn) CursorPosition(ctx context.Context) (DesktopActionResult, error) {
	return sc.DesktopAction(ctx, DesktopAction{Action: ActionCursorPosition})
}
