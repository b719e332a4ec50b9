package node

import "github.com/zeish/zeish/internal/control"

// A node is what the control plane runs sandboxes on (its interface).
var _ control.Node = (*Node)(nil)
