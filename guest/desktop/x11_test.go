//go:build linux

package desktop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testskip"
)

// startXvfb runs a desktop on a free display of the host, as the test's own
// user, and stops it when the test ends.
func startXvfb(t testing.TB, width, height int) *Session {
	t.Helper()
	if _, err := exec.LookPath("Xvfb"); err != nil {
		testskip.Skip(t, "Xvfb is not installed (scripts/deps.sh installs it)")
	}
	display := ""
	for n := 90 + os.Getpid()%300; n < 999; n++ {
		if _, err := os.Stat(fmt.Sprintf("/tmp/.X%d-lock", n)); os.IsNotExist(err) {
			display = fmt.Sprintf(":%d", n)
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var log bytes.Buffer
	s, err := Start(ctx, Config{Display: display, Width: width, Height: height}, Identity{Home: t.TempDir(), Name: "test"}, &log)
	if err != nil {
		t.Fatalf("start desktop: %v\n%s", err, log.String())
	}
	t.Cleanup(s.Stop)
	return s
}

// client is an X client of the test: one window over the whole screen that
// records the input it receives.
type client struct {
	conn   *xgb.Conn
	win    xproto.Window
	events chan xgb.Event
}

func newClient(t *testing.T, display string, size Size, colour uint32) *client {
	t.Helper()
	conn, err := xgb.NewConnDisplay(display)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	scr := xproto.Setup(conn).DefaultScreen(conn)
	win, err := xproto.NewWindowId(conn)
	if err != nil {
		t.Fatal(err)
	}
	mask := uint32(xproto.EventMaskKeyPress | xproto.EventMaskKeyRelease | xproto.EventMaskButtonPress |
		xproto.EventMaskButtonRelease | xproto.EventMaskExposure | xproto.EventMaskStructureNotify)
	if err := xproto.CreateWindowChecked(conn, scr.RootDepth, win, scr.Root, 0, 0, uint16(size.Width), uint16(size.Height), 0,
		xproto.WindowClassInputOutput, scr.RootVisual, xproto.CwBackPixel|xproto.CwOverrideRedirect|xproto.CwEventMask,
		[]uint32{colour, 1, mask}).Check(); err != nil {
		t.Fatal(err)
	}
	c := &client{conn: conn, win: win, events: make(chan xgb.Event, 1000)}
	go func() {
		for {
			ev, xerr := conn.WaitForEvent()
			if ev == nil && xerr == nil {
				close(c.events)
				return
			}
			if ev != nil {
				c.events <- ev
			}
		}
	}()
	xproto.MapWindow(conn, win)
	c.waitFor(t, func(ev xgb.Event) bool { _, ok := ev.(xproto.ExposeEvent); return ok })
	if err := xproto.SetInputFocusChecked(conn, xproto.InputFocusPointerRoot, win, xproto.TimeCurrentTime).Check(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *client) waitFor(t *testing.T, match func(xgb.Event) bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-c.events:
			if match(ev) {
				return
			}
		case <-timeout:
			t.Fatal("no such X event within 10 s")
		}
	}
}

// input collects the key and button events delivered until there are n.
// XTEST's events go through the server's input queue, so they may reach
// the window a little after Do has answered; order is kept.
func (c *client) input(t *testing.T, n int) []xgb.Event {
	t.Helper()
	var out []xgb.Event
	timeout := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case ev := <-c.events:
			switch ev.(type) {
			case xproto.KeyPressEvent, xproto.KeyReleaseEvent, xproto.ButtonPressEvent, xproto.ButtonReleaseEvent:
				out = append(out, ev)
			}
		case <-timeout:
			t.Fatalf("%d input events arrived, want %d: %v", len(out), n, out)
		}
	}
	return out
}

// typed turns key presses back into keysyms with the server's current
// mapping, as a toolkit does.
func (c *client) typed(t *testing.T, evs []xgb.Event) []Keysym {
	setup := xproto.Setup(c.conn)
	km, err := xproto.GetKeyboardMapping(c.conn, setup.MinKeycode, byte(int(setup.MaxKeycode)-int(setup.MinKeycode)+1)).Reply()
	if err != nil {
		t.Fatal(err)
	}
	var out []Keysym
	for _, ev := range evs {
		p, ok := ev.(xproto.KeyPressEvent)
		if !ok {
			continue
		}
		col := 0
		if p.State&xproto.ModMaskShift != 0 {
			col = 1
		}
		out = append(out, Keysym(km.Keysyms[(int(p.Detail)-int(setup.MinKeycode))*int(km.KeysymsPerKeycode)+col]))
	}
	return out
}

func TestDisplayOnXvfb(t *testing.T) {
	s := startXvfb(t, 640, 480)
	d := s.Display
	if got := d.Size(); got != (Size{640, 480}) || d.Depth() != 24 {
		t.Fatalf("size %v depth %d, want 640x480x24", got, d.Depth())
	}
	shot := func() []byte {
		var b bytes.Buffer
		if err := d.Screenshot(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	before := shot()
	c := newClient(t, s.Config().Display, d.Size(), 0x336699)

	t.Run("screenshot", func(t *testing.T) {
		b := shot()
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if sz := img.Bounds().Size(); sz.X != 640 || sz.Y != 480 {
			t.Fatalf("PNG is %v, want 640x480", sz)
		}
		r, g, bl, _ := img.At(320, 240).RGBA()
		if r>>8 != 0x33 || g>>8 != 0x66 || bl>>8 != 0x99 {
			t.Errorf("pixel = %02x%02x%02x, want the window's 336699", r>>8, g>>8, bl>>8)
		}
		if bytes.Equal(b, before) {
			t.Error("the screenshot did not change when a window appeared")
		}
	})

	do := func(a Action) Result {
		t.Helper()
		res, err := d.Do(a)
		if err != nil {
			t.Fatalf("%s: %v", a.Action, err)
		}
		return res
	}
	pt := func(x, y int) (*int, *int) { return &x, &y }

	t.Run("mouse_move and cursor_position", func(t *testing.T) {
		x, y := pt(100, 120)
		if res := do(Action{Action: ActionMouseMove, X: x, Y: y}); res != (Result{100, 120}) {
			t.Errorf("after mouse_move: %v", res)
		}
		if res := do(Action{Action: ActionCursorPosition}); res != (Result{100, 120}) {
			t.Errorf("cursor_position: %v", res)
		}
	})

	buttons := func(evs []xgb.Event) []string {
		var out []string
		for _, ev := range evs {
			switch e := ev.(type) {
			case xproto.ButtonPressEvent:
				out = append(out, fmt.Sprintf("press %d at %d,%d", e.Detail, e.EventX, e.EventY))
			case xproto.ButtonReleaseEvent:
				out = append(out, fmt.Sprintf("release %d at %d,%d", e.Detail, e.EventX, e.EventY))
			}
		}
		return out
	}
	clicks := []struct {
		name string
		a    func() Action
		want []string
	}{
		{"left_click", func() Action { x, y := pt(200, 210); return Action{Action: ActionLeftClick, X: x, Y: y} },
			[]string{"press 1 at 200,210", "release 1 at 200,210"}},
		{"right_click where the cursor is", func() Action { return Action{Action: ActionRightClick} },
			[]string{"press 3 at 200,210", "release 3 at 200,210"}},
		{"double_click", func() Action { x, y := pt(5, 6); return Action{Action: ActionDoubleClick, X: x, Y: y} },
			[]string{"press 1 at 5,6", "release 1 at 5,6", "press 1 at 5,6", "release 1 at 5,6"}},
		{"scroll down 2", func() Action {
			x, y := pt(300, 300)
			return Action{Action: ActionScroll, X: x, Y: y, Direction: "down", Amount: 2}
		},
			[]string{"press 5 at 300,300", "release 5 at 300,300", "press 5 at 300,300", "release 5 at 300,300"}},
		{"drag", func() Action {
			x, y := pt(10, 20)
			tx, ty := pt(90, 100)
			return Action{Action: ActionDrag, X: x, Y: y, ToX: tx, ToY: ty}
		}, []string{"press 1 at 10,20", "release 1 at 90,100"}},
	}
	for _, cl := range clicks {
		t.Run(cl.name, func(t *testing.T) {
			do(cl.a())
			got := buttons(c.input(t, len(cl.want)))
			if fmt.Sprint(got) != fmt.Sprint(cl.want) {
				t.Errorf("events %q, want %q", got, cl.want)
			}
		})
	}

	t.Run("type", func(t *testing.T) {
		do(Action{Action: ActionType, Text: "aB!\n"})
		got := c.typed(t, c.input(t, 12))
		want := []Keysym{'a', 0xffe1, 'B', 0xffe1, '!', 0xff0d}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("typed %x, want %x", got, want)
		}
	})

	t.Run("type a character the keymap lacks", func(t *testing.T) {
		do(Action{Action: ActionType, Text: "€"})
		got := c.typed(t, c.input(t, 2))
		if len(got) != 1 || got[0] != 0x010020ac {
			t.Errorf("typed %x, want the euro sign's keysym 10020ac", got)
		}
	})

	t.Run("key combo", func(t *testing.T) {
		do(Action{Action: ActionKey, Keys: "ctrl+c Return"})
		evs := c.input(t, 6)
		var last xproto.KeyPressEvent
		for _, ev := range evs {
			if p, ok := ev.(xproto.KeyPressEvent); ok && c.typed(t, []xgb.Event{p})[0] == 'c' {
				last = p
			}
		}
		if last.State&xproto.ModMaskControl == 0 {
			t.Errorf("c was not pressed with Control held (events %v)", evs)
		}
		got := c.typed(t, evs)
		want := []Keysym{0xffe3, 'c', 0xff0d}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("pressed %x, want %x", got, want)
		}
		releases := 0
		for _, ev := range evs {
			if _, ok := ev.(xproto.KeyReleaseEvent); ok {
				releases++
			}
		}
		if releases != 3 {
			t.Errorf("%d key releases, want 3 (no key left held)", releases)
		}
	})

	t.Run("bad input does nothing", func(t *testing.T) {
		x, y := pt(640, 10)
		_, err := d.Do(Action{Action: ActionLeftClick, X: x, Y: y})
		if !errors.Is(err, errdefs.ErrOffScreen) {
			t.Errorf("click off screen: %v", err)
		}
		_, err = d.Do(Action{Action: ActionKey, Keys: "ctrl+bogus"})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("unknown key: %v", err)
		}
		if res := do(Action{Action: ActionCursorPosition}); res != (Result{90, 100}) {
			t.Errorf("cursor moved to %v", res)
		}
		// Events keep their order: had the refused actions sent any, they
		// would come before this click's.
		do(Action{Action: ActionMiddleClick})
		if got, want := buttons(c.input(t, 2)), []string{"press 2 at 90,100", "release 2 at 90,100"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("events %q, want only the middle click's %q", got, want)
		}
	})

	t.Run("screenshot differs after drawing", func(t *testing.T) {
		a := shot()
		gc, _ := xproto.NewGcontextId(c.conn)
		xproto.CreateGC(c.conn, gc, xproto.Drawable(c.win), xproto.GcForeground, []uint32{0xff0000})
		if err := xproto.PolyFillRectangleChecked(c.conn, xproto.Drawable(c.win), gc, []xproto.Rectangle{{X: 0, Y: 0, Width: 50, Height: 50}}).Check(); err != nil {
			t.Fatal(err)
		}
		b := shot()
		if bytes.Equal(a, b) {
			t.Fatal("the screenshot did not change")
		}
		img, _ := png.Decode(bytes.NewReader(b))
		if r, g, bl, _ := img.At(10, 10).RGBA(); r>>8 != 0xff || g != 0 || bl != 0 {
			t.Errorf("pixel 10,10 = %x %x %x, want red", r, g, bl)
		}
	})
}

func TestStartFailures(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"too small", Config{Width: 10, Height: 10}},
		{"too deep", Config{Depth: 8}},
		{"bad display", Config{Display: "0"}},
	}
	for _, c := range cases {
		if _, err := Start(context.Background(), c.cfg, Identity{}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want Config
		bad  bool
	}{
		{in: "1280x800x24", want: Config{Display: ":0", Width: 1280, Height: 800, Depth: 24}},
		{in: "1024x768", want: Config{Display: ":0", Width: 1024, Height: 768, Depth: 24}},
		{in: "1024x768x16", bad: true},
		{in: "10x10", bad: true},
		{in: "big", bad: true},
		{in: "1024x", bad: true},
	}
	for _, c := range cases {
		got, err := ParseSize(c.in)
		if c.bad != (err != nil) || (!c.bad && got != c.want) {
			t.Errorf("%q: %+v, %v", c.in, got, err)
		}
	}
}

// Benchmarks on a host Xvfb at the default size: a screenshot (GetImage and
// PNG encoding), a click and typing 32 characters, each answered after a
// round trip to the X server.
func BenchmarkDesktop(b *testing.B) {
	s := startXvfb(b, DefaultWidth, DefaultHeight)
	d := s.Display
	b.Run("screenshot", func(b *testing.B) {
		var size int
		for b.Loop() {
			var buf bytes.Buffer
			if err := d.Screenshot(&buf); err != nil {
				b.Fatal(err)
			}
			size = buf.Len()
		}
		b.ReportMetric(float64(size), "png-bytes")
	})
	b.Run("left_click", func(b *testing.B) {
		x, y := 100, 100
		for b.Loop() {
			if _, err := d.Do(Action{Action: ActionLeftClick, X: &x, Y: &y}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("type_32_chars", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.Do(Action{Action: ActionType, Text: "echo Typed-By-Desktop > /tmp/x!"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// With a window manager installed, Start returns once it manages the
// screen: a window mapped right after is mapped by it (decorated, so
// reparented into its frame).
func TestWindowManagerIsReady(t *testing.T) {
	if _, err := exec.LookPath("openbox"); err != nil {
		testskip.Skip(t, "openbox is not installed (scripts/deps.sh installs it)")
	}
	s := startXvfb(t, 640, 480)
	if s.WindowManager() != "openbox" {
		t.Fatalf("window manager %q, want openbox", s.WindowManager())
	}
	conn, err := xgb.NewConnDisplay(s.Config().Display)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	scr := xproto.Setup(conn).DefaultScreen(conn)
	win, _ := xproto.NewWindowId(conn)
	if err := xproto.CreateWindowChecked(conn, scr.RootDepth, win, scr.Root, 0, 0, 200, 100, 0,
		xproto.WindowClassInputOutput, scr.RootVisual, 0, nil).Check(); err != nil {
		t.Fatal(err)
	}
	xproto.MapWindow(conn, win)
	deadline := time.Now().Add(20 * time.Second)
	for {
		attrs, err := xproto.GetWindowAttributes(conn, win).Reply()
		if err != nil {
			t.Fatal(err)
		}
		tree, err := xproto.QueryTree(conn, win).Reply()
		if err != nil {
			t.Fatal(err)
		}
		if attrs.MapState == xproto.MapStateViewable && tree.Parent != scr.Root {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the window manager never mapped a new window (map state %d, parent %d)", attrs.MapState, tree.Parent)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
