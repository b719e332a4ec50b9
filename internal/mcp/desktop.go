package mcp

import (
	"context"
	"fmt"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	zeish "github.com/zeish/zeish/sdk/go"
)

// The desktop tools let a model drive a sandbox's desktop directly: look
// (screenshot), point (click), write (type) and press (key), the loop of
// the computer-use tools models are trained on.

type ScreenshotInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox whose desktop to capture (its id sbx_… or its name); it must have been created with desktop: true"`
}

type ScreenshotOutput struct {
	Width   int `json:"width" jsonschema:"the screen's width in pixels"`
	Height  int `json:"height" jsonschema:"the screen's height in pixels"`
	CursorX int `json:"cursor_x" jsonschema:"the pointer's x"`
	CursorY int `json:"cursor_y" jsonschema:"the pointer's y"`
}

type ClickInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox with a desktop (id or name)"`
	X         int    `json:"x" jsonschema:"pixels from the screen's left edge"`
	Y         int    `json:"y" jsonschema:"pixels from the screen's top edge"`
	Button    string `json:"button,omitempty" jsonschema:"left (default), right, middle, or double for a left double click"`
}

type TypeInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox with a desktop (id or name)"`
	Text      string `json:"text" jsonschema:"text typed into the focused window; a newline presses Return"`
}

type KeyInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox with a desktop (id or name)"`
	Keys      string `json:"keys" jsonschema:"key combos as xdotool writes them: Return, ctrl+c, ctrl+shift+t, alt+F4, BackSpace, Escape, Up; several separated by spaces are pressed in turn"`
}

type CursorOutput struct {
	X int `json:"x" jsonschema:"the pointer's x after the action"`
	Y int `json:"y" jsonschema:"the pointer's y after the action"`
}

func (t *tools) addDesktopTools(s *sdkmcp.Server) {
	sdkmcp.AddTool(s, &sdkmcp.Tool{
		Name:  "screenshot",
		Title: "See a sandbox's desktop",
		Description: "Capture the whole screen of a sandbox created with desktop: true, as a PNG image. " +
			"Coordinates for click are pixels of this image, from its top left corner.",
		Annotations: &sdkmcp.ToolAnnotations{ReadOnlyHint: true},
	}, t.screenshot)
	add(s, &sdkmcp.Tool{
		Name:        "click",
		Title:       "Click on a sandbox's desktop",
		Description: "Move the pointer to x, y on the desktop and click (left by default; right, middle or double). Take a screenshot first to find where.",
		Annotations: &sdkmcp.ToolAnnotations{DestructiveHint: ptr(true)},
	}, t.click)
	add(s, &sdkmcp.Tool{
		Name:        "type",
		Title:       "Type text on a sandbox's desktop",
		Description: "Type text into the window that has the keyboard focus (click into it first). A newline presses Return.",
		Annotations: &sdkmcp.ToolAnnotations{DestructiveHint: ptr(true)},
	}, t.typeText)
	add(s, &sdkmcp.Tool{
		Name:        "key",
		Title:       "Press keys on a sandbox's desktop",
		Description: "Press key combos such as Return, ctrl+c, ctrl+l, alt+Tab or Escape in the focused window.",
		Annotations: &sdkmcp.ToolAnnotations{DestructiveHint: ptr(true)},
	}, t.key)
}

func (t *tools) screenshot(ctx context.Context, _ *sdkmcp.CallToolRequest, in ScreenshotInput) (*sdkmcp.CallToolResult, ScreenshotOutput, error) {
	conn, err := t.client.Connect(ctx, in.SandboxID)
	if err != nil {
		return nil, ScreenshotOutput{}, asToolError(err)
	}
	res, err := conn.DesktopAction(ctx, zeish.DesktopAction{Action: zeish.ActionScreenshot})
	if err != nil {
		return nil, ScreenshotOutput{}, asToolError(err)
	}
	out := ScreenshotOutput{Width: res.Width, Height: res.Height, CursorX: res.X, CursorY: res.Y}
	return &sdkmcp.CallToolResult{Content: []sdkmcp.Content{
		&sdkmcp.ImageContent{Data: res.Image, MIMEType: "image/png"},
		&sdkmcp.TextContent{Text: fmt.Sprintf("screen %dx%d, pointer at %d,%d", out.Width, out.Height, out.CursorX, out.CursorY)},
	}}, out, nil
}

func (t *tools) click(ctx context.Context, in ClickInput) (CursorOutput, error) {
	switch in.Button {
	case "", "left", "right", "middle", "double":
	default:
		return CursorOutput{}, invalidArgf("button %q: want left, right, middle or double", in.Button)
	}
	return t.act(ctx, in.SandboxID, func(conn *zeish.SandboxConn) (zeish.DesktopActionResult, error) {
		return conn.Click(ctx, in.X, in.Y, in.Button)
	})
}

func (t *tools) typeText(ctx context.Context, in TypeInput) (CursorOutput, error) {
	return t.act(ctx, in.SandboxID, func(conn *zeish.SandboxConn) (zeish.DesktopActionResult, error) {
		return conn.TypeText(ctx, in.Text)
	})
}

func (t *tools) key(ctx context.Context, in KeyInput) (CursorOutput, error) {
	return t.act(ctx, in.SandboxID, func(conn *zeish.SandboxConn) (zeish.DesktopActionResult, error) {
		return conn.PressKeys(ctx, in.Keys)
	})
}

func (t *tools) act(ctx context.Context, id string, fn func(*zeish.SandboxConn) (zeish.DesktopActionResult, error)) (CursorOutput, error) {
	conn, err := t.client.Connect(ctx, id)
	if err != nil {
		return CursorOutput{}, err
	}
	res, err := fn(conn)
	if err != nil {
		return CursorOutput{}, err
	}
	return CursorOutput{X: res.X, Y: res.Y}, nil
}
