package api

import "github.com/zeish/zeish/guest/desktop"

// DesktopAction is one action on a sandbox's desktop (POST
// /data/v1/sandboxes/{id}/desktop/actions), shaped like the computer-use
// tool APIs: screenshot, cursor_position, mouse_move, left_click,
// right_click, middle_click, double_click, drag, type, key, scroll.
type DesktopAction = desktop.Action

// DesktopActionResult is the cursor's position after the action; a
// screenshot action also carries the PNG (base64 in JSON) and its size.
type DesktopActionResult struct {
	X      int    `json:"x"`
	Y      int    `json:"y"`
	Image  []byte `json:"image,omitempty"`
	Width  int    `json:"width,omitempty"`
	Height int    `json:"height,omitempty"`
}

// DesktopStatus is GET /api/v1/public/sandboxes/{id}/desktop: the
// desktop's display and screen size (running is false while the sandbox
// does not run).
type DesktopStatus = desktop.Status
