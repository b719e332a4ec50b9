package desktop

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"log"
	"math/bits"
	"sync"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
	"github.com/zeish/zeish/errdefs"
)

func init() {
	// xgb logs connection trouble on its own; the callers report errors.
	xgb.Logger = log.New(io.Discard, "", 0)
}

// X event types XTEST fakes.
const (
	xKeyPress      = 2
	xKeyRelease    = 3
	xButtonPress   = 4
	xButtonRelease = 5
	xMotionNotify  = 6
)

// Pointer buttons: 4..7 are the wheel.
const (
	buttonLeft       = 1
	buttonMiddle     = 2
	buttonRight      = 3
	buttonWheelUp    = 4
	buttonWheelDown  = 5
	buttonWheelLeft  = 6
	buttonWheelRight = 7
)

// dragSteps is how many motions a drag makes between its ends: toolkits
// that start a drag only after the pointer moved some pixels with the
// button held need to see it move.
const dragSteps = 8

// Display is a connection to an X server's first screen that performs
// actions on it. It is safe for concurrent use; actions run one at a time.
type Display struct {
	mu     sync.Mutex
	conn   *xgb.Conn
	root   xproto.Window
	size   Size
	depth  int
	order  binary.ByteOrder // of image data
	masks  [3]uint32        // red, green, blue of the root visual
	minKey xproto.Keycode
	// keymap is the server's keyboard mapping, perCode keysyms per keycode
	// from minKey; spare keycodes (bound to nothing) are bound on demand to
	// keysyms the keymap lacks.
	keymap  []xproto.Keysym
	perCode int
	spare   []xproto.Keycode
	nextSp  int
	bound   map[Keysym]xproto.Keycode
}

// Open connects to display (":0") and checks that it has XTEST and a
// 24- or 32-bit true-colour screen.
func Open(display string) (*Display, error) {
	conn, err := xgb.NewConnDisplay(display)
	if err != nil {
		return nil, fmt.Errorf("connect to X display %s: %v: %w", display, err, errdefs.ErrUnavailable)
	}
	d, err := newDisplay(conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	// Errors of unchecked requests and MappingNotify arrive as events;
	// nothing here waits for them, so drain them lest xgb's queue fill.
	go func() {
		for {
			ev, xerr := conn.WaitForEvent()
			if ev == nil && xerr == nil {
				return
			}
		}
	}()
	return d, nil
}

func newDisplay(conn *xgb.Conn) (*Display, error) {
	if err := xtest.Init(conn); err != nil {
		return nil, fmt.Errorf("X display has no XTEST extension: %v: %w", err, errdefs.ErrUnavailable)
	}
	setup := xproto.Setup(conn)
	if len(setup.Roots) == 0 {
		return nil, fmt.Errorf("X display has no screen: %w", errdefs.ErrUnavailable)
	}
	scr := setup.Roots[0]
	d := &Display{conn: conn, root: scr.Root, size: Size{int(scr.WidthInPixels), int(scr.HeightInPixels)},
		depth: int(scr.RootDepth), order: binary.LittleEndian, minKey: setup.MinKeycode, bound: map[Keysym]xproto.Keycode{}}
	if setup.ImageByteOrder == xproto.ImageOrderMSBFirst {
		d.order = binary.BigEndian
	}
	bpp := 0
	for _, f := range setup.PixmapFormats {
		if int(f.Depth) == d.depth {
			bpp = int(f.BitsPerPixel)
		}
	}
	for _, dep := range scr.AllowedDepths {
		for _, v := range dep.Visuals {
			if v.VisualId == scr.RootVisual {
				d.masks = [3]uint32{v.RedMask, v.GreenMask, v.BlueMask}
			}
		}
	}
	if bpp != 32 || d.masks[0] == 0 {
		return nil, fmt.Errorf("X screen of depth %d (%d bits per pixel): want a true-colour 24-bit screen: %w", d.depth, bpp, errdefs.ErrUnavailable)
	}
	count := int(setup.MaxKeycode) - int(setup.MinKeycode) + 1
	km, err := xproto.GetKeyboardMapping(conn, setup.MinKeycode, byte(count)).Reply()
	if err != nil {
		return nil, fmt.Errorf("read the X keyboard mapping: %v: %w", err, errdefs.ErrUnavailable)
	}
	d.keymap, d.perCode = km.Keysyms, int(km.KeysymsPerKeycode)
	for i := range count {
		empty := true
		for _, k := range d.keymap[i*d.perCode : (i+1)*d.perCode] {
			empty = empty && k == 0
		}
		if empty {
			d.spare = append(d.spare, xproto.Keycode(int(d.minKey)+i))
		}
	}
	return d, nil
}

// Close ends the connection.
func (d *Display) Close() { d.conn.Close() }

// Size is the screen's size.
func (d *Display) Size() Size { return d.size }

// Depth is the screen's colour depth in bits.
func (d *Display) Depth() int { return d.depth }

// Screenshot writes the whole screen to w as a PNG.
func (d *Display) Screenshot(w io.Writer) error {
	img, err := d.Capture()
	if err != nil {
		return err
	}
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	return enc.Encode(w, img)
}

// Capture reads the whole screen.
func (d *Display) Capture() (*image.RGBA, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	reply, err := xproto.GetImage(d.conn, xproto.ImageFormatZPixmap, xproto.Drawable(d.root), 0, 0,
		uint16(d.size.Width), uint16(d.size.Height), 0xffffffff).Reply()
	if err != nil {
		return nil, d.fail("screenshot", err)
	}
	w, h := d.size.Width, d.size.Height
	if len(reply.Data) < w*h*4 {
		return nil, fmt.Errorf("screenshot: %d bytes for %dx%d pixels: %w", len(reply.Data), w, h, errdefs.ErrInternal)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	var shift [3]int
	for i, m := range d.masks {
		shift[i] = bits.TrailingZeros32(m)
	}
	for i := range w * h {
		px := d.order.Uint32(reply.Data[i*4:])
		o := img.Pix[i*4 : i*4+4 : i*4+4]
		o[0] = byte((px & d.masks[0]) >> shift[0])
		o[1] = byte((px & d.masks[1]) >> shift[1])
		o[2] = byte((px & d.masks[2]) >> shift[2])
		o[3] = 0xff
	}
	return img, nil
}

// Do validates a against the screen and performs it; a screenshot is
// Screenshot's job and is refused here.
func (d *Display) Do(a Action) (Result, error) {
	if err := Validate(a, d.size); err != nil {
		return Result{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.do(a); err != nil {
		return Result{}, d.fail(a.Action, err)
	}
	// A round trip: every faked event has reached the server (and so the
	// window it goes to) before the caller hears back.
	x, y, err := d.cursor()
	if err != nil {
		return Result{}, d.fail(a.Action, err)
	}
	return Result{X: x, Y: y}, nil
}

func (d *Display) do(a Action) error {
	if a.X != nil {
		d.move(*a.X, *a.Y)
	}
	switch a.Action {
	case ActionScreenshot:
		return fmt.Errorf("screenshot is served as an image, not by Do: %w", errdefs.ErrInvalidArgument)
	case ActionCursorPosition, ActionMouseMove:
	case ActionLeftClick:
		d.click(buttonLeft, 1)
	case ActionRightClick:
		d.click(buttonRight, 1)
	case ActionMiddleClick:
		d.click(buttonMiddle, 1)
	case ActionDoubleClick:
		d.click(buttonLeft, 2)
	case ActionDrag:
		d.fake(xButtonPress, buttonLeft)
		fx, fy, tx, ty := *a.X, *a.Y, *a.ToX, *a.ToY
		for i := 1; i <= dragSteps; i++ {
			d.move(fx+(tx-fx)*i/dragSteps, fy+(ty-fy)*i/dragSteps)
		}
		d.fake(xButtonRelease, buttonLeft)
	case ActionScroll:
		button := map[string]byte{"up": buttonWheelUp, "down": buttonWheelDown, "left": buttonWheelLeft, "right": buttonWheelRight}[a.Direction]
		n := a.Amount
		if n == 0 {
			n = DefaultScroll
		}
		d.click(button, n)
	case ActionType:
		syms, err := TextKeysyms(a.Text)
		if err != nil {
			return err
		}
		for _, k := range syms {
			if err := d.press(Combo{k}); err != nil {
				return err
			}
		}
	case ActionKey:
		combos, err := ParseKeys(a.KeysOrText())
		if err != nil {
			return err
		}
		for _, c := range combos {
			if err := d.press(c); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *Display) fake(typ, detail byte) {
	xtest.FakeInput(d.conn, typ, detail, 0, d.root, 0, 0, 0)
}

func (d *Display) move(x, y int) {
	xtest.FakeInput(d.conn, xMotionNotify, 0, 0, d.root, int16(x), int16(y), 0)
}

func (d *Display) click(button byte, times int) {
	for range times {
		d.fake(xButtonPress, button)
		d.fake(xButtonRelease, button)
	}
}

// press presses the keys of c in order and releases them in reverse. A key
// whose keysym sits in the second column of its keycode (a capital, "!")
// is pressed with Shift.
func (d *Display) press(c Combo) error {
	var down []byte
	for _, k := range c {
		code, shifted, err := d.keycode(k)
		if err != nil {
			return err
		}
		if shifted {
			shift, _, err := d.keycode(0xffe1)
			if err != nil {
				return err
			}
			down = append(down, shift)
			d.fake(xKeyPress, shift)
		}
		down = append(down, code)
		d.fake(xKeyPress, code)
	}
	for i := len(down) - 1; i >= 0; i-- {
		d.fake(xKeyRelease, down[i])
	}
	return nil
}

// keycode finds the key that yields k: from the keymap, else a spare
// keycode bound to k now (and kept bound, so events of it still queued in
// a client mean k). Spares are reused round-robin once all are taken.
func (d *Display) keycode(k Keysym) (code byte, shifted bool, err error) {
	for i, s := range d.keymap {
		col := i % d.perCode
		if Keysym(s) == k && col < 2 {
			return byte(int(d.minKey) + i/d.perCode), col == 1, nil
		}
	}
	if c, ok := d.bound[k]; ok {
		return byte(c), false, nil
	}
	if len(d.spare) == 0 {
		return 0, false, fmt.Errorf("no key of the X keyboard types keysym 0x%x and none is free to bind it: %w", uint32(k), errdefs.ErrInvalidArgument)
	}
	c := d.spare[d.nextSp%len(d.spare)]
	d.nextSp++
	for old, oc := range d.bound {
		if oc == c {
			delete(d.bound, old)
		}
	}
	syms := make([]xproto.Keysym, d.perCode)
	for i := range syms {
		syms[i] = xproto.Keysym(k)
	}
	if err := xproto.ChangeKeyboardMappingChecked(d.conn, 1, c, byte(d.perCode), syms).Check(); err != nil {
		return 0, false, err
	}
	d.bound[k] = c
	return byte(c), false, nil
}

// Cursor is the pointer's position.
func (d *Display) Cursor() (Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	x, y, err := d.cursor()
	if err != nil {
		return Result{}, d.fail(ActionCursorPosition, err)
	}
	return Result{X: x, Y: y}, nil
}

func (d *Display) cursor() (int, int, error) {
	p, err := xproto.QueryPointer(d.conn, d.root).Reply()
	if err != nil {
		return 0, 0, err
	}
	return int(p.RootX), int(p.RootY), nil
}

// fail classifies an error of the X connection: one that already has a code
// keeps it, anything else means the X server is gone or broke the protocol.
func (d *Display) fail(what string, err error) error {
	var coded *errdefs.Error
	if errors.As(err, &coded) {
		return err
	}
	return fmt.Errorf("desktop %s: X server: %v: %w", what, err, errdefs.ErrUnavailable)
}

// PNGSize reads the width and height of a PNG without decoding its pixels.
func PNGSize(b []byte) (Size, error) {
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return Size{}, err
	}
	return Size{cfg.Width, cfg.Height}, nil
}

// AwaitWindowManager returns once a window manager manages the screen: one
// has taken SubstructureRedirect on the root, and a probe window it was asked
// to map has been mapped by it. Until then a program's window may be lost: a
// WM that is still starting can drop a client's MapRequest (openbox does),
// leaving the window unmapped for good. A probe not mapped within half a
// second is replaced by a fresh one, whose MapRequest a WM that has reached
// its event loop handles.
func (d *Display) AwaitWindowManager(ctx context.Context, gone <-chan struct{}) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	const reprobe = 5 // ticks
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	wait := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-gone:
			return errors.New("the window manager exited")
		case <-tick.C:
			return nil
		}
	}
	for {
		attrs, err := xproto.GetWindowAttributes(d.conn, d.root).Reply()
		if err != nil {
			return err
		}
		if attrs.AllEventMasks&xproto.EventMaskSubstructureRedirect != 0 {
			break
		}
		if err := wait(); err != nil {
			return err
		}
	}
	var probe xproto.Window
	defer func() {
		if probe != 0 {
			xproto.DestroyWindow(d.conn, probe)
		}
	}()
	for i := 0; ; i++ {
		if i%reprobe == 0 {
			if probe != 0 {
				xproto.DestroyWindow(d.conn, probe)
			}
			p, err := d.newWindow()
			if err != nil {
				return err
			}
			probe = p
			if err := xproto.MapWindowChecked(d.conn, probe).Check(); err != nil {
				return err
			}
		}
		attrs, err := xproto.GetWindowAttributes(d.conn, probe).Reply()
		if err != nil {
			return err
		}
		if attrs.MapState == xproto.MapStateViewable {
			return nil
		}
		if err := wait(); err != nil {
			return err
		}
	}
}

// newWindow makes a 1x1 window on the root, unmapped.
func (d *Display) newWindow() (xproto.Window, error) {
	w, err := xproto.NewWindowId(d.conn)
	if err != nil {
		return 0, err
	}
	err = xproto.CreateWindowChecked(d.conn, 0, w, d.root, 0, 0, 1, 1, 0, xproto.WindowClassInputOutput, 0, 0, nil).Check()
	return w, err
}
