package zeish

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
)

func TestDesktopRequests(t *testing.T) {
	res := DesktopActionResult{X: 1, Y: 2}
	tests := []struct {
		name     string
		call     func(context.Context, *SandboxConn) error
		wantBody string
	}{
		{"click", func(ctx context.Context, c *SandboxConn) error { _, err := c.Click(ctx, 10, 20, ""); return err },
			`{"action":"left_click","x":10,"y":20}`},
		{"right click", func(ctx context.Context, c *SandboxConn) error { _, err := c.Click(ctx, 10, 20, "right"); return err },
			`{"action":"right_click","x":10,"y":20}`},
		{"double click at 0, 0", func(ctx context.Context, c *SandboxConn) error { _, err := c.Click(ctx, 0, 0, "double"); return err },
			`{"action":"double_click","x":0,"y":0}`},
		{"type", func(ctx context.Context, c *SandboxConn) error { _, err := c.TypeText(ctx, "hi\n"); return err },
			`{"action":"type","text":"hi\n"}`},
		{"key", func(ctx context.Context, c *SandboxConn) error { _, err := c.PressKeys(ctx, "ctrl+c"); return err },
			`{"action":"key","keys":"ctrl+c"}`},
		{"drag", func(ctx context.Context, c *SandboxConn) error { _, err := c.Drag(ctx, 1, 2, 3, 4); return err },
			`{"action":"drag","x":1,"y":2,"to_x":3,"to_y":4}`},
		{"scroll", func(ctx context.Context, c *SandboxConn) error { _, err := c.Scroll(ctx, 5, 6, "down", 2); return err },
			`{"action":"scroll","x":5,"y":6,"direction":"down","amount":2}`},
		{"cursor", func(ctx context.Context, c *SandboxConn) error { _, err := c.CursorPosition(ctx); return err },
			`{"action":"cursor_position"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{
				"POST /api/v1/public/sandboxes/{id}/access":    accessRoute(15 * time.Minute),
				"POST /data/v1/sandboxes/{id}/desktop/actions": reply(200, res),
			})
			ctx := context.Background()
			conn, err := f.client().Connect(ctx, "sbx_1")
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.call(ctx, conn); err != nil {
				t.Fatal(err)
			}
			if rec := f.last(); !jsonEqual(t, rec.Body, tt.wantBody) || rec.Auth != "Bearer tok-1" {
				t.Errorf("request %+v, want body %s", rec, tt.wantBody)
			}
		})
	}
}

func TestDesktopScreenshotAndErrors(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nfake")
	f := newFake(t, map[string]http.HandlerFunc{
		"POST /api/v1/public/sandboxes/{id}/access": accessRoute(15 * time.Minute),
		"GET /data/v1/sandboxes/{id}/desktop/screenshot": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "image/png")
			w.Write(png)
		},
		"POST /data/v1/sandboxes/{id}/desktop/actions": replyError(400, "off_screen", "x, y = 5000, 1 is off the 1280x800 screen"),
		"GET /api/v1/public/sandboxes/{id}/desktop":    replyError(400, "desktop_not_enabled", "no desktop"),
	})
	ctx := context.Background()
	conn, err := f.client().Connect(ctx, "sbx_1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := conn.Screenshot(ctx)
	if err != nil || string(got) != string(png) {
		t.Errorf("screenshot %q, %v", got, err)
	}
	if _, err := conn.Click(ctx, 5000, 1, ""); !errors.Is(err, errdefs.ErrOffScreen) {
		t.Errorf("click off screen: %v", err)
	}
	if _, err := f.client().Desktop(ctx, "sbx_1"); !errors.Is(err, errdefs.ErrDesktopNotEnabled) {
		t.Errorf("status without a desktop: %v", err)
	}
}
