package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// TestDesktop drives a real desktop the way a computer-use agent does,
// through the public API against a VM of the desktop template: an xterm is
// opened, clicked into, a command is typed and Return pressed, and the file
// it writes is read back by exec; screenshots are PNGs of the configured
// size that change with the screen. Bad input is refused with its code and
// changes nothing; a fork can drop the desktop or turn it on. One zeishd
// serves every case.
func TestDesktop(t *testing.T) {
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		testskip.Skip(t, "mmdebstrap not installed (scripts/deps.sh)")
	}
	testenv.RequireQEMU(t)
	testenv.DesktopTemplate(t) // built once into the shared cache (several minutes the first time)
	const width, height = 1024, 768
	s := startServer(t, "ZEISH_DESKTOP_TEMPLATE=on", "ZEISH_DESKTOP_SIZE=1024x768x24")
	ctx := ctxFor(t, 25*time.Minute)
	c := s.client

	created := time.Now()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "desk", Template: "desktop", Desktop: true, MemoryMiB: 1024, DiskMiB: 4096}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("create: %+v %v", sb, err)
	}
	t.Logf("create with a desktop → running: %d ms", time.Since(created).Milliseconds())
	conn, err := c.Connect(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	// timed logs how long a call took (for the report; nothing is asserted).
	timed := func(what string, start time.Time) { t.Logf("%s: %d ms", what, time.Since(start).Milliseconds()) }
	// shot takes a screenshot and checks it is a PNG of the screen's size.
	shot := func(t *testing.T) ([]byte, image.Image) {
		t.Helper()
		b, err := conn.Screenshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("screenshot is not a PNG: %v", err)
		}
		if sz := img.Bounds().Size(); sz.X != width || sz.Y != height {
			t.Fatalf("screenshot is %dx%d, want %dx%d", sz.X, sz.Y, width, height)
		}
		return b, img
	}
	act := func(t *testing.T, a zeish.DesktopAction) zeish.DesktopActionResult {
		t.Helper()
		res, err := conn.DesktopAction(ctx, a)
		if err != nil {
			t.Fatalf("%s: %v", a.Action, err)
		}
		return res
	}
	pt := func(x, y int) (*int, *int) { return &x, &y }

	t.Run("status", func(t *testing.T) {
		st, err := c.Desktop(ctx, sb.Name)
		if err != nil {
			t.Fatal(err)
		}
		want := zeish.DesktopStatus{Running: true, Display: ":0", Width: width, Height: height, Depth: 24, WindowManager: "openbox", User: "user"}
		if st != want {
			t.Errorf("status %+v, want %+v", st, want)
		}
		// Programs an exec starts find the display, and the X server runs
		// as the unprivileged user.
		out, _, _ := run(t, conn, "sh", "-c", `echo "$DISPLAY"; ps -o user= -C Xvfb`)
		if got := strings.Fields(out); len(got) != 2 || got[0] != ":0" || got[1] != "user" {
			t.Errorf("DISPLAY and Xvfb's user: %q", out)
		}
	})

	var before []byte
	t.Run("xterm: click, type, key", func(t *testing.T) {
		before, _ = shot(t)
		var errOut bytes.Buffer
		res, err := conn.Exec(ctx, api.ExecRequest{User: "user", Argv: []string{"sh", "-c",
			"setsid xterm -geometry 80x24+0+0 -e bash --norc >/dev/null 2>&1 < /dev/null &"}}, nil, &errOut)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("start xterm: %+v %v %s", res, err, errOut.String())
		}
		// The xterm is up once the screen shows it.
		for {
			if b, _ := shot(t); !bytes.Equal(b, before) {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("the xterm never appeared on the screen")
			}
			time.Sleep(500 * time.Millisecond)
		}
		x, y := pt(200, 150)
		start := time.Now()
		shot(t)
		timed("screenshot", start)
		start = time.Now()
		if res := act(t, zeish.DesktopAction{Action: zeish.ActionLeftClick, X: x, Y: y}); res.X != 200 || res.Y != 150 {
			t.Errorf("cursor after the click at %d,%d", res.X, res.Y)
		}
		timed("left_click", start)
		start = time.Now()
		act(t, zeish.DesktopAction{Action: zeish.ActionType, Text: "echo Typed-By-Desktop > /tmp/typed.txt"})
		timed("type (37 characters)", start)
		act(t, zeish.DesktopAction{Action: zeish.ActionKey, Keys: "Return"})
		// bash runs the line on its own time; the file appears when it has.
		for {
			out, _, res := run(t, conn, "cat", "/tmp/typed.txt")
			if res.ExitCode == 0 && out == "Typed-By-Desktop\n" {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the typed command never wrote its file (last: %q)", out)
			}
			time.Sleep(500 * time.Millisecond)
		}
		out, _, _ := run(t, conn, "stat", "-c", "%U", "/tmp/typed.txt")
		if out != "user\n" {
			t.Errorf("the file's owner is %q, want user (the xterm's shell)", out)
		}
	})

	t.Run("screenshot changes with the screen", func(t *testing.T) {
		after, _ := shot(t)
		if bytes.Equal(before, after) {
			t.Error("the screenshot is the same before and after the xterm")
		}
		// The JSON action answers with the same picture and the cursor.
		res := act(t, zeish.DesktopAction{Action: zeish.ActionScreenshot})
		img, err := png.Decode(bytes.NewReader(res.Image))
		if err != nil || res.Width != width || res.Height != height || img.Bounds().Dx() != width {
			t.Errorf("screenshot action: %dx%d, %v", res.Width, res.Height, err)
		}
	})

	t.Run("pointer", func(t *testing.T) {
		x, y := pt(700, 500)
		act(t, zeish.DesktopAction{Action: zeish.ActionMouseMove, X: x, Y: y})
		if res := act(t, zeish.DesktopAction{Action: zeish.ActionCursorPosition}); res.X != 700 || res.Y != 500 {
			t.Errorf("cursor_position %d,%d, want 700,500", res.X, res.Y)
		}
		tx, ty := pt(width-1, height-1)
		if res := act(t, zeish.DesktopAction{Action: zeish.ActionDrag, X: x, Y: y, ToX: tx, ToY: ty}); res.X != width-1 || res.Y != height-1 {
			t.Errorf("cursor after a drag to the last pixel: %d,%d", res.X, res.Y)
		}
		act(t, zeish.DesktopAction{Action: zeish.ActionScroll, X: x, Y: y, Direction: "down", Amount: 2})
	})

	t.Run("bad input is refused and changes nothing", func(t *testing.T) {
		home := act(t, zeish.DesktopAction{Action: zeish.ActionCursorPosition})
		ox, oy := pt(width, 10)
		nx, ny := pt(-1, 10)
		cases := []struct {
			name string
			body string
			code string
		}{
			{"click off the right edge", `{"action":"left_click","x":1024,"y":10}`, "off_screen"},
			{"move below the screen", `{"action":"mouse_move","x":10,"y":768}`, "off_screen"},
			{"drag ending off screen", `{"action":"drag","x":1,"y":1,"to_x":5000,"to_y":1}`, "off_screen"},
			{"negative", `{"action":"mouse_move","x":-1,"y":10}`, "off_screen"},
			{"unknown action", `{"action":"teleport","x":1,"y":1}`, "invalid_argument"},
			{"unknown key", `{"action":"key","keys":"ctrl+nosuchkey"}`, "invalid_argument"},
			{"move without y", `{"action":"mouse_move","x":1}`, "invalid_argument"},
			{"unknown field", `{"action":"left_click","button":9}`, "invalid_argument"},
		}
		acc, err := c.Access(ctx, sb.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		path := acc.URL + "/desktop/actions"
		for _, tc := range cases {
			var body api.ErrorBody
			status, _, raw := s.raw(t, http.MethodPost, path, acc.Token, tc.body)
			if err := json.Unmarshal(raw, &body); err != nil || status != 400 || body.Error.Code != tc.code {
				t.Errorf("%s: %d %s, want 400 %s", tc.name, status, raw, tc.code)
			}
		}
		// Through the SDK the code is the errdefs sentinel.
		if _, err := conn.DesktopAction(ctx, zeish.DesktopAction{Action: zeish.ActionLeftClick, X: ox, Y: oy}); !errors.Is(err, errdefs.ErrOffScreen) {
			t.Errorf("SDK click off screen: %v", err)
		}
		if _, err := conn.DesktopAction(ctx, zeish.DesktopAction{Action: zeish.ActionMouseMove, X: nx, Y: ny}); !errors.Is(err, errdefs.ErrOffScreen) {
			t.Errorf("SDK move to -1: %v", err)
		}
		if res := act(t, zeish.DesktopAction{Action: zeish.ActionCursorPosition}); res.X != home.X || res.Y != home.Y {
			t.Errorf("refused actions moved the cursor from %+v to %+v", home, res)
		}
	})

	t.Run("forks drop the desktop or turn it on", func(t *testing.T) {
		off := false
		resp, err := c.CloneSandbox(ctx, sb.ID, zeish.CloneRequest{Name: "desk-off", Desktop: &off}, zeish.Wait())
		if err != nil || len(resp.Sandboxes) != 1 || resp.Sandboxes[0].State != sandbox.StateRunning || resp.Sandboxes[0].Desktop {
			t.Fatalf("fork with desktop: false: %+v %v", resp, err)
		}
		plain := resp.Sandboxes[0]
		pconn, err := c.Connect(ctx, plain.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pconn.Screenshot(ctx); !errors.Is(err, errdefs.ErrDesktopNotEnabled) {
			t.Errorf("screenshot of a sandbox without a desktop: %v", err)
		}
		x, y := pt(1, 1)
		if _, err := pconn.DesktopAction(ctx, zeish.DesktopAction{Action: zeish.ActionLeftClick, X: x, Y: y}); !errors.Is(err, errdefs.ErrDesktopNotEnabled) {
			t.Errorf("click on a sandbox without a desktop: %v", err)
		}
		if _, err := c.Desktop(ctx, plain.ID); !errors.Is(err, errdefs.ErrDesktopNotEnabled) {
			t.Errorf("status of a sandbox without a desktop: %v", err)
		}
		// The child's X server, inherited from the parent's memory, is gone.
		if _, _, res := run(t, pconn, "pgrep", "-x", "Xvfb"); res.ExitCode == 0 {
			t.Error("Xvfb still runs in the fork without a desktop")
		}

		on := true
		resp, err = c.CloneSandbox(ctx, plain.ID, zeish.CloneRequest{Name: "desk-on", Desktop: &on}, zeish.Wait())
		if err != nil || len(resp.Sandboxes) != 1 || resp.Sandboxes[0].State != sandbox.StateRunning || !resp.Sandboxes[0].Desktop {
			t.Fatalf("fork with desktop: true: %+v %v", resp, err)
		}
		child := resp.Sandboxes[0]
		st, err := c.Desktop(ctx, child.ID)
		if err != nil || !st.Running || st.Width != width || st.Height != height {
			t.Errorf("status of the fork that turned the desktop on: %+v %v", st, err)
		}
		cconn, err := c.Connect(ctx, child.ID)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := cconn.Screenshot(ctx); err != nil || len(b) == 0 {
			t.Errorf("screenshot of the fork: %v", err)
		}
		for _, id := range []string{child.ID, plain.ID} {
			if _, err := c.DeleteSandbox(context.WithoutCancel(ctx), id, zeish.Wait()); err != nil {
				t.Errorf("delete %s: %v", id, err)
			}
		}
	})
}
