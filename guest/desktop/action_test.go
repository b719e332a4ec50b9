package desktop

import (
	"errors"
	"strings"
	"testing"

	"github.com/zeish/zeish/errdefs"
)

func at(x, y int) (*int, *int) { return &x, &y }

func TestValidate(t *testing.T) {
	screen := Size{1280, 800}
	x, y := at(10, 20)
	ex, ey := at(1280, 5)
	nx, ny := at(-1, 5)
	lx, ly := at(1279, 799)
	cases := []struct {
		name string
		a    Action
		want error // nil, ErrInvalidArgument or ErrOffScreen
	}{
		{"screenshot", Action{Action: ActionScreenshot}, nil},
		{"cursor_position", Action{Action: ActionCursorPosition}, nil},
		{"screenshot with x", Action{Action: ActionScreenshot, X: x, Y: y}, errdefs.ErrInvalidArgument},
		{"mouse_move", Action{Action: ActionMouseMove, X: x, Y: y}, nil},
		{"mouse_move to the last pixel", Action{Action: ActionMouseMove, X: lx, Y: ly}, nil},
		{"mouse_move needs x, y", Action{Action: ActionMouseMove}, errdefs.ErrInvalidArgument},
		{"mouse_move with x only", Action{Action: ActionMouseMove, X: x}, errdefs.ErrInvalidArgument},
		{"mouse_move past the right edge", Action{Action: ActionMouseMove, X: ex, Y: ey}, errdefs.ErrOffScreen},
		{"mouse_move negative", Action{Action: ActionMouseMove, X: nx, Y: ny}, errdefs.ErrOffScreen},
		{"left_click where the cursor is", Action{Action: ActionLeftClick}, nil},
		{"right_click at", Action{Action: ActionRightClick, X: x, Y: y}, nil},
		{"double_click off screen", Action{Action: ActionDoubleClick, X: ex, Y: ey}, errdefs.ErrOffScreen},
		{"click with text", Action{Action: ActionLeftClick, Text: "a"}, errdefs.ErrInvalidArgument},
		{"click with to_x", Action{Action: ActionLeftClick, ToX: x, ToY: y}, errdefs.ErrInvalidArgument},
		{"drag", Action{Action: ActionDrag, X: x, Y: y, ToX: lx, ToY: ly}, nil},
		{"drag without an end", Action{Action: ActionDrag, X: x, Y: y}, errdefs.ErrInvalidArgument},
		{"drag ending off screen", Action{Action: ActionDrag, X: x, Y: y, ToX: ex, ToY: ey}, errdefs.ErrOffScreen},
		{"type", Action{Action: ActionType, Text: "echo hi > /tmp/x\n"}, nil},
		{"type nothing", Action{Action: ActionType}, errdefs.ErrInvalidArgument},
		{"type a control character", Action{Action: ActionType, Text: "a\x07"}, errdefs.ErrInvalidArgument},
		{"type too much", Action{Action: ActionType, Text: strings.Repeat("a", MaxTextRunes+1)}, errdefs.ErrInvalidArgument},
		{"type at x, y", Action{Action: ActionType, Text: "a", X: x, Y: y}, errdefs.ErrInvalidArgument},
		{"key", Action{Action: ActionKey, Keys: "ctrl+c"}, nil},
		{"key in text, as computer-use tools send it", Action{Action: ActionKey, Text: "Return"}, nil},
		{"key unknown", Action{Action: ActionKey, Keys: "ctrl+nosuchkey"}, errdefs.ErrInvalidArgument},
		{"key none", Action{Action: ActionKey}, errdefs.ErrInvalidArgument},
		{"scroll", Action{Action: ActionScroll, X: x, Y: y, Direction: "down", Amount: 5}, nil},
		{"scroll at the cursor, default amount", Action{Action: ActionScroll, Direction: "up"}, nil},
		{"scroll sideways", Action{Action: ActionScroll, Direction: "sideways"}, errdefs.ErrInvalidArgument},
		{"scroll too far", Action{Action: ActionScroll, Direction: "up", Amount: MaxScroll + 1}, errdefs.ErrInvalidArgument},
		{"scroll off screen", Action{Action: ActionScroll, Direction: "up", X: ex, Y: ey}, errdefs.ErrOffScreen},
		{"no action", Action{}, errdefs.ErrInvalidArgument},
		{"unknown action", Action{Action: "teleport"}, errdefs.ErrInvalidArgument},
	}
	for _, c := range cases {
		err := Validate(c.a, screen)
		switch {
		case c.want == nil && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != nil && !errors.Is(err, c.want):
			t.Errorf("%s: err = %v, want %s", c.name, err, c.want)
		}
	}
	// Without a known screen, only negative coordinates are off it.
	if err := Validate(Action{Action: ActionMouseMove, X: ex, Y: ey}, Size{}); err != nil {
		t.Errorf("unknown screen: %v", err)
	}
}

func TestParseKeys(t *testing.T) {
	cases := []struct {
		in   string
		want []Combo
		bad  bool
	}{
		{in: "Return", want: []Combo{{0xff0d}}},
		{in: "enter", want: []Combo{{0xff0d}}},
		{in: "ctrl+c", want: []Combo{{0xffe3, 'c'}}},
		{in: "CTRL+Shift+T", want: []Combo{{0xffe3, 0xffe1, 'T'}}},
		{in: "ctrl+a Delete", want: []Combo{{0xffe3, 'a'}, {0xffff}}},
		{in: "alt+F4", want: []Combo{{0xffe9, 0xffc1}}},
		{in: "super", want: []Combo{{0xffeb}}},
		{in: "ctrl+plus", want: []Combo{{0xffe3, '+'}}},
		{in: "é", want: []Combo{{0xe9}}},
		{in: "€", want: []Combo{{0x010020ac}}},
		{in: "ctrl+", bad: true},
		{in: "hyper_x", bad: true},
		{in: "", bad: true},
		{in: strings.Repeat("a ", MaxKeyCombos+1), bad: true},
	}
	for _, c := range cases {
		got, err := ParseKeys(c.in)
		if c.bad {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%q: err = %v, want invalid_argument", c.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("%q: %v, want %v", c.in, got, c.want)
			continue
		}
		for i := range got {
			if len(got[i]) != len(c.want[i]) {
				t.Errorf("%q: %v, want %v", c.in, got, c.want)
				break
			}
			for j := range got[i] {
				if got[i][j] != c.want[i][j] {
					t.Errorf("%q: %v, want %v", c.in, got, c.want)
				}
			}
		}
	}
}

func TestTextKeysyms(t *testing.T) {
	got, err := TextKeysyms("aZ \n\t€")
	if err != nil {
		t.Fatal(err)
	}
	want := []Keysym{'a', 'Z', ' ', 0xff0d, 0xff09, 0x010020ac}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%d: %#x, want %#x", i, got[i], want[i])
		}
	}
	if _, err := TextKeysyms("\xff"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("invalid UTF-8: %v", err)
	}
}
