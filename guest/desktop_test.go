//go:build linux

package guest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest/desktop"
	"github.com/zeish/zeish/internal/testskip"
)

// freeDisplay is an X display number no server of the host holds.
func freeDisplay(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("Xvfb"); err != nil {
		testskip.Skip(t, "Xvfb is not installed (scripts/deps.sh installs it)")
	}
	for n := 400 + os.Getpid()%300; n < 999; n++ {
		if _, err := os.Stat(fmt.Sprintf("/tmp/.X%d-lock", n)); os.IsNotExist(err) {
			return fmt.Sprintf(":%d", n)
		}
	}
	t.Fatal("no free X display")
	return ""
}

// The agent runs the desktop Configure asks for, serves its actions,
// screenshots and status over the channel, and stops it when a later
// Configure has none.
func TestDesktopThroughTheAgent(t *testing.T) {
	display := freeDisplay(t)
	startDir = t.TempDir()
	t.Cleanup(func() { startDir = "/run/zeish" })
	a := startAgent(t)
	c := a.connect(t)
	t.Cleanup(func() { a.srv.configureDesktop(nil) })

	if _, err := c.DesktopAction(ctxT(t, 5*time.Second), desktop.Action{Action: desktop.ActionCursorPosition}); !errors.Is(err, errdefs.ErrDesktopNotEnabled) {
		t.Fatalf("action before any desktop: %v, want desktop_not_enabled", err)
	}
	cfg := Config{Desktop: &desktop.Config{Display: display, Width: 800, Height: 600}}
	for range 2 { // the second is a fork's or restore's: the running desktop is kept
		if err := c.Configure(ctxT(t, 60*time.Second), cfg); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.DesktopStatus(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if want := (desktop.Status{Running: true, Display: display, Width: 800, Height: 600, Depth: 24, WindowManager: st.WindowManager}); st != want {
		t.Errorf("status %+v, want %+v", st, want)
	}
	var out bytes.Buffer
	if _, err := c.Exec(ctxT(t, 5*time.Second), ExecRequest{Argv: []string{"sh", "-c", "echo $DISPLAY"}}, nil, &out, nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != display {
		t.Errorf("exec's DISPLAY = %q, want %q", got, display)
	}

	x, y := 30, 40
	res, err := c.DesktopAction(ctxT(t, 5*time.Second), desktop.Action{Action: desktop.ActionMouseMove, X: &x, Y: &y})
	if err != nil || res != (desktop.Result{X: 30, Y: 40}) {
		t.Errorf("mouse_move: %v, %v", res, err)
	}
	bad := 800
	if _, err := c.DesktopAction(ctxT(t, 5*time.Second), desktop.Action{Action: desktop.ActionMouseMove, X: &bad, Y: &y}); !errors.Is(err, errdefs.ErrOffScreen) {
		t.Errorf("mouse_move off screen: %v, want off_screen", err)
	}
	png, info, err := c.DesktopScreenshot(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if size, err := desktop.PNGSize(png); err != nil || size != (desktop.Size{Width: 800, Height: 600}) || info.Width != 800 || info.Size != int64(len(png)) {
		t.Errorf("screenshot: %v %+v %v", size, info, err)
	}

	// An X server that died is started again by the next action.
	lock := fmt.Sprintf("/tmp/.X%s-lock", strings.TrimPrefix(display, ":"))
	a.srv.desk.sess.Stop()
	if _, err := c.DesktopAction(ctxT(t, 60*time.Second), desktop.Action{Action: desktop.ActionCursorPosition}); err != nil {
		t.Errorf("action after the X server died: %v", err)
	}

	if err := c.Configure(ctxT(t, 10*time.Second), Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DesktopStatus(ctxT(t, 5*time.Second)); !errors.Is(err, errdefs.ErrDesktopNotEnabled) {
		t.Errorf("status after the desktop was dropped: %v", err)
	}
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Errorf("Xvfb still holds %s after the desktop was dropped", lock)
	}

	// A desktop the guest cannot run fails Configure with its class.
	bad2 := Config{Desktop: &desktop.Config{Display: display, User: "no-such-user-zeish"}}
	if err := c.Configure(ctxT(t, 10*time.Second), bad2); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("desktop as a missing user: %v, want invalid_argument", err)
	}
}
