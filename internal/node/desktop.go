package node

import (
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/guest/desktop"
	"github.com/zeish/zeish/template"
)

// desktopFor is the desktop a sandbox with desktop: true asks its guest for
// at every boot, fork and restore: the node's screen size, run by the
// template's default user, else by the debian templates' unprivileged
// account (the X server needs no root).
func (n *Node) desktopFor(cfg *guest.Config) *desktop.Config {
	d := n.opts.Desktop.WithDefaults()
	d.User = template.DebianUser
	if cfg.User != "" && cfg.User != "root" && cfg.User != "0" {
		d.User = cfg.User
	}
	return &d
}
