package server

import (
	"net/http"
)

// DataPlaneProxy is a control plane's way to its nodes' data planes (the
// cluster package's Router): it sends a data-plane request to node
// nodeID's data plane at path, headers (the caller's token) and upgrades
// kept, for the node checks the token itself. Guest ports' HTTP,
// WebSockets and raw TCP, and the console's upload, go this way: bytes
// the control plane does not read. The reads of a guest and template
// builds are typed calls of the node protocol, made by internal/control.
type DataPlaneProxy interface {
	ProxyToNode(w http.ResponseWriter, r *http.Request, nodeID, path string)
}

// WriteError answers err with its status and stable code, as every
// handler of this package does (for handlers outside it, e.g. a proxy).
func WriteError(w http.ResponseWriter, r *http.Request, err error) { writeError(w, r, err) }
