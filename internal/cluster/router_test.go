package cluster

import (
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/internal/server"
)

// The Router is a node to the control plane and a cluster to the admin API.
var (
	_ control.Node   = (*Router)(nil)
	_ server.Cluster = (*Router)(nil)
)
