package api

// PortRequest is POST /public/sandboxes/{id}/ports: open a guest port to
// the public (no token needed) or close it again (it then needs the
// sandbox's data-plane token, as every port does by default).
type PortRequest struct {
	Port   int  `json:"port"`
	Public bool `json:"public"`
}

// Port says how a guest port is reached.
type Port struct {
	Port   int    `json:"port"`
	Public bool   `json:"public"`
	URL    string `json:"url"`            // <data plane>/ports/<port>/
	Host   string `json:"host,omitempty"` // <port>-<id>.<domain>, when the server has a public domain
	TCPURL string `json:"tcp_url"`        // WebSocket carrying raw TCP to the port
}
