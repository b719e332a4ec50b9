// Package desktop is a sandbox's desktop: the X display sandboxd runs when a
// sandbox has desktop: true, and the actions agents drive it with, shaped
// like the computer-use tool APIs they already speak (screenshot,
// mouse_move, left_click, drag, type, key, scroll, cursor_position).
//
// This file is the actions' contract and their validation, shared by the
// server (which refuses bad input before it reaches the guest) and the
// agent (which checks again against the real screen). x11.go performs them
// on an X server over the X protocol (XTEST for input, GetImage for
// screenshots); no xdotool is needed in the guest.
package desktop

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/zeish/zeish/errdefs"
)

// Actions, as computer-use tools name them.
const (
	ActionScreenshot     = "screenshot"
	ActionCursorPosition = "cursor_position"
	ActionMouseMove      = "mouse_move"
	ActionLeftClick      = "left_click"
	ActionRightClick     = "right_click"
	ActionMiddleClick    = "middle_click"
	ActionDoubleClick    = "double_click"
	ActionDrag           = "drag"
	ActionType           = "type"
	ActionKey            = "key"
	ActionScroll         = "scroll"
)

// Actions lists every action, for docs and error messages.
var Actions = []string{ActionScreenshot, ActionCursorPosition, ActionMouseMove, ActionLeftClick, ActionRightClick,
	ActionMiddleClick, ActionDoubleClick, ActionDrag, ActionType, ActionKey, ActionScroll}

// Limits of one action: a type or key action holds the agent's X
// connection while it runs, so it is bounded.
const (
	MaxTextRunes  = 4096
	MaxKeyCombos  = 64
	MaxScroll     = 100
	DefaultScroll = 3
)

// Action is one desktop action. Coordinates are pixels of the screen, from
// its top left corner.
type Action struct {
	Action string `json:"action"`
	// X and Y: where mouse_move goes, where a click or scroll happens (the
	// cursor's position when absent) and where a drag starts.
	X *int `json:"x,omitempty"`
	Y *int `json:"y,omitempty"`
	// ToX and ToY: where a drag ends.
	ToX *int `json:"to_x,omitempty"`
	ToY *int `json:"to_y,omitempty"`
	// Text is what type types ("\n" presses Return, "\t" Tab). A key action
	// takes it too when Keys is empty, as computer-use tools send it.
	Text string `json:"text,omitempty"`
	// Keys are key combos, as xdotool writes them: "ctrl+c", "Return",
	// "ctrl+shift+t"; several separated by spaces are pressed in turn.
	Keys string `json:"keys,omitempty"`
	// Direction (up, down, left, right) and Amount (wheel clicks, default
	// 3) of a scroll.
	Direction string `json:"direction,omitempty"`
	Amount    int    `json:"amount,omitempty"`
}

// Result is what an action reports: the cursor's position after it.
type Result struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// Size is a screen's size in pixels.
type Size struct {
	Width  int `json:"width"`
	Height int `json:"height"`
}

// In reports whether x, y is a pixel of the screen.
func (s Size) In(x, y int) bool { return x >= 0 && y >= 0 && x < s.Width && y < s.Height }

// Validate checks a against the action's contract and, when screen is
// known (non-zero), that its coordinates are on it. Errors wrap
// errdefs.ErrInvalidArgument, or errdefs.ErrOffScreen.
func Validate(a Action, screen Size) error {
	switch a.Action {
	case ActionScreenshot, ActionCursorPosition:
		if a.X != nil || a.Y != nil || a.ToX != nil || a.ToY != nil || a.Text != "" || a.Keys != "" || a.Direction != "" || a.Amount != 0 {
			return invalid("%s takes no arguments", a.Action)
		}
		return nil
	case ActionMouseMove:
		return point(a, screen, true)
	case ActionLeftClick, ActionRightClick, ActionMiddleClick, ActionDoubleClick:
		return point(a, screen, false)
	case ActionDrag:
		if err := point(a, screen, true); err != nil {
			return err
		}
		if a.ToX == nil || a.ToY == nil {
			return invalid("drag needs to_x and to_y (where it ends)")
		}
		return onScreen("to_x, to_y", *a.ToX, *a.ToY, screen)
	case ActionType:
		if a.X != nil || a.Y != nil || a.ToX != nil || a.ToY != nil {
			return invalid("type takes no coordinates: click where the text goes first")
		}
		_, err := TextKeysyms(a.Text)
		return err
	case ActionKey:
		if a.X != nil || a.Y != nil || a.ToX != nil || a.ToY != nil {
			return invalid("key takes no coordinates")
		}
		_, err := ParseKeys(a.KeysOrText())
		return err
	case ActionScroll:
		if err := point(a, screen, false); err != nil {
			return err
		}
		switch a.Direction {
		case "up", "down", "left", "right":
		default:
			return invalid("scroll direction %q: want up, down, left or right", a.Direction)
		}
		if a.Amount < 0 || a.Amount > MaxScroll {
			return invalid("scroll amount %d: want 1..%d (0: %d)", a.Amount, MaxScroll, DefaultScroll)
		}
		return nil
	case "":
		return invalid("action is required: one of %s", strings.Join(Actions, ", "))
	default:
		return invalid("unknown action %q: want one of %s", a.Action, strings.Join(Actions, ", "))
	}
}

// KeysOrText is what a key action presses.
func (a Action) KeysOrText() string {
	if a.Keys != "" {
		return a.Keys
	}
	return a.Text
}

// point checks X, Y (required or optional, but both or neither) and that
// only a drag has ToX, ToY.
func point(a Action, screen Size, required bool) error {
	if a.Action != ActionDrag && (a.ToX != nil || a.ToY != nil) {
		return invalid("%s takes no to_x, to_y", a.Action)
	}
	if a.Action != ActionType && a.Action != ActionKey && (a.Text != "" || a.Keys != "") {
		return invalid("%s takes no text or keys", a.Action)
	}
	if a.Action != ActionScroll && (a.Direction != "" || a.Amount != 0) {
		return invalid("%s takes no direction or amount", a.Action)
	}
	if (a.X == nil) != (a.Y == nil) {
		return invalid("%s needs both x and y, or neither", a.Action)
	}
	if a.X == nil {
		if required {
			return invalid("%s needs x and y", a.Action)
		}
		return nil
	}
	return onScreen("x, y", *a.X, *a.Y, screen)
}

func onScreen(what string, x, y int, screen Size) error {
	if x < 0 || y < 0 {
		return fmt.Errorf("%s = %d, %d is off the screen (coordinates start at 0, 0): %w", what, x, y, errdefs.ErrOffScreen)
	}
	if screen.Width > 0 && !screen.In(x, y) {
		return fmt.Errorf("%s = %d, %d is off the %dx%d screen: %w", what, x, y, screen.Width, screen.Height, errdefs.ErrOffScreen)
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// Keysym is an X keysym.
type Keysym uint32

// Combo is keys pressed together, in order, and released in reverse.
type Combo []Keysym

// keysyms names keys the way xdotool and X do, plus the aliases
// computer-use models write ("ctrl", "enter", "cmd"). Lookups ignore case.
var keysyms = map[string]Keysym{
	"shift": 0xffe1, "shift_l": 0xffe1, "shift_r": 0xffe2,
	"ctrl": 0xffe3, "control": 0xffe3, "control_l": 0xffe3, "ctrl_l": 0xffe3, "control_r": 0xffe4, "ctrl_r": 0xffe4,
	"alt": 0xffe9, "alt_l": 0xffe9, "alt_r": 0xffea, "option": 0xffe9,
	"meta": 0xffe7, "meta_l": 0xffe7, "meta_r": 0xffe8,
	"super": 0xffeb, "super_l": 0xffeb, "super_r": 0xffec, "cmd": 0xffeb, "command": 0xffeb, "win": 0xffeb, "windows": 0xffeb,
	"backspace": 0xff08, "tab": 0xff09, "return": 0xff0d, "enter": 0xff0d, "linefeed": 0xff0a,
	"pause": 0xff13, "scroll_lock": 0xff14, "escape": 0xff1b, "esc": 0xff1b, "delete": 0xffff, "del": 0xffff,
	"home": 0xff50, "left": 0xff51, "up": 0xff52, "right": 0xff53, "down": 0xff54,
	"page_up": 0xff55, "pageup": 0xff55, "prior": 0xff55, "page_down": 0xff56, "pagedown": 0xff56, "next": 0xff56,
	"end": 0xff57, "begin": 0xff58, "print": 0xff61, "insert": 0xff63, "menu": 0xff67, "num_lock": 0xff7f,
	"caps_lock": 0xffe5, "kp_enter": 0xff8d,
	"space": 0x20, "exclam": 0x21, "quotedbl": 0x22, "numbersign": 0x23, "dollar": 0x24, "percent": 0x25,
	"ampersand": 0x26, "apostrophe": 0x27, "parenleft": 0x28, "parenright": 0x29, "asterisk": 0x2a,
	"plus": 0x2b, "comma": 0x2c, "minus": 0x2d, "period": 0x2e, "slash": 0x2f, "colon": 0x3a,
	"semicolon": 0x3b, "less": 0x3c, "equal": 0x3d, "greater": 0x3e, "question": 0x3f, "at": 0x40,
	"bracketleft": 0x5b, "backslash": 0x5c, "bracketright": 0x5d, "asciicircum": 0x5e, "underscore": 0x5f,
	"grave": 0x60, "braceleft": 0x7b, "bar": 0x7c, "braceright": 0x7d, "asciitilde": 0x7e,
}

func init() {
	for i := 1; i <= 24; i++ {
		keysyms[fmt.Sprintf("f%d", i)] = Keysym(0xffbe + i - 1)
	}
}

// ParseKey resolves one key name: a name above, or a single character
// ("a", "A", "5", "é").
func ParseKey(name string) (Keysym, error) {
	if k, ok := keysyms[strings.ToLower(name)]; ok {
		return k, nil
	}
	if r, size := utf8.DecodeRuneInString(name); size == len(name) && r != utf8.RuneError {
		if k, ok := RuneKeysym(r); ok && r >= 0x20 {
			return k, nil
		}
	}
	return 0, invalid("unknown key %q (keys are X keysym names such as Return, Tab, Escape, BackSpace, Up, F5, or one character; modifiers ctrl, shift, alt, super)", name)
}

// ParseKeys parses xdotool-style combos: "ctrl+c", "Return", "ctrl+a Delete".
func ParseKeys(s string) ([]Combo, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, invalid("key needs keys, e.g. \"Return\" or \"ctrl+c\"")
	}
	if len(fields) > MaxKeyCombos {
		return nil, invalid("key takes at most %d combos, got %d", MaxKeyCombos, len(fields))
	}
	out := make([]Combo, 0, len(fields))
	for _, f := range fields {
		var combo Combo
		for _, name := range strings.Split(f, "+") {
			if name == "" {
				return nil, invalid("key combo %q has an empty key (the + key is \"plus\")", f)
			}
			k, err := ParseKey(name)
			if err != nil {
				return nil, err
			}
			combo = append(combo, k)
		}
		out = append(out, combo)
	}
	return out, nil
}

// RuneKeysym is the keysym that types r: Latin-1 characters are their own
// keysyms, other characters are 0x01000000 + their code point (X's Unicode
// keysyms); newline and tab are Return and Tab.
func RuneKeysym(r rune) (Keysym, bool) {
	switch {
	case r == '\n' || r == '\r':
		return 0xff0d, true
	case r == '\t':
		return 0xff09, true
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r > unicode.MaxRune:
		return 0, false
	case r <= 0xff:
		return Keysym(r), true
	default:
		return Keysym(0x01000000 + r), true
	}
}

// TextKeysyms are the keysyms that type s.
func TextKeysyms(s string) ([]Keysym, error) {
	if s == "" {
		return nil, invalid("type needs text")
	}
	if !utf8.ValidString(s) {
		return nil, invalid("text is not valid UTF-8")
	}
	if n := utf8.RuneCountInString(s); n > MaxTextRunes {
		return nil, invalid("type takes at most %d characters, got %d", MaxTextRunes, n)
	}
	out := make([]Keysym, 0, len(s))
	for _, r := range s {
		k, ok := RuneKeysym(r)
		if !ok {
			return nil, invalid("text holds control character %U, which cannot be typed (use key)", r)
		}
		out = append(out, k)
	}
	return out, nil
}
