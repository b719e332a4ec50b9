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
	// BrowserURL is the port on an origin of its own, what to open in a
	// browser: http(s)://<port>-<id>.<domain>[:port]/ with the server's
	// public domain, else with "localhost" when the server was reached on
	// a loopback address (browsers resolve *.localhost to it). URL, on the
	// server's own origin, is for programs: a browser gets its pages
	// sandboxed there (an opaque origin, no cookies).
	BrowserURL string `json:"browser_url,omitempty"`
}

// PortList is GET /public/sandboxes/{id}/ports: the ports the guest
// listens on and those opened to the public, each with how it is reached.
type PortList struct {
	Ports []ListedPort `json:"ports"`
}

// ListedPort is a Port with what the guest does on it.
type ListedPort struct {
	Port
	Listening bool `json:"listening"`          // a guest socket listens on it now
	Loopback  bool `json:"loopback,omitempty"` // only on 127.0.0.1/::1 (the proxy still reaches it)
}
