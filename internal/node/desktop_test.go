package node

import (
	"testing"

	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/guest/desktop"
)

func TestDesktopFor(t *testing.T) {
	cases := []struct {
		name     string
		opts     desktop.Config
		execUser string
		want     desktop.Config
	}{
		{"defaults, root template", desktop.Config{}, "", desktop.Config{Display: ":0", Width: 1280, Height: 800, Depth: 24, User: "user"}},
		{"root by name", desktop.Config{}, "root", desktop.Config{Display: ":0", Width: 1280, Height: 800, Depth: 24, User: "user"}},
		{"the template's user", desktop.Config{Width: 1024, Height: 768}, "app", desktop.Config{Display: ":0", Width: 1024, Height: 768, Depth: 24, User: "app"}},
	}
	for _, c := range cases {
		n := &Node{opts: Options{Desktop: c.opts}}
		if got := n.desktopFor(&guest.Config{User: c.execUser}); *got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, *got, c.want)
		}
	}
}
