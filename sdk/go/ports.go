package zeish

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/coder/websocket"

	"github.com/zeish/zeish/api"
)

type (
	PortRequest = api.PortRequest
	Port        = api.Port
	PortList    = api.PortList
	ListedPort  = api.ListedPort
)

// Ports lists the TCP ports the guest listens on and those opened to the
// public, with how each is reached.
func (c *Client) Ports(ctx context.Context, id string) ([]ListedPort, error) {
	var l PortList
	err := c.call(ctx, c.control(http.MethodGet, sandboxPath(id, "/ports"), nil), &l)
	return l.Ports, err
}

// SetPort opens a guest port to requests without a token (public), or
// closes it again, and says how the port is reached.
func (c *Client) SetPort(ctx context.Context, id string, port int, public bool) (Port, error) {
	var p Port
	err := c.call(ctx, c.control(http.MethodPost, sandboxPath(id, "/ports"), PortRequest{Port: port, Public: public}), &p)
	return p, err
}

// PortURL is the HTTP base of a guest port in the data plane and the token
// to send with it (Authorization: Bearer), for any HTTP or WebSocket client.
func (sc *SandboxConn) PortURL(ctx context.Context, port int) (url, token string, err error) {
	acc, err := sc.token(ctx, false)
	if err != nil {
		return "", "", err
	}
	return fmt.Sprintf("%s/ports/%d/", acc.URL, port), acc.Token, nil
}

// DialPort opens a raw TCP connection to a port of the guest, carried by a
// WebSocket through the data plane. Closing the conn closes both ends.
func (sc *SandboxConn) DialPort(ctx context.Context, port int) (net.Conn, error) {
	acc, err := sc.token(ctx, false)
	if err != nil {
		return nil, err
	}
	u := "ws" + strings.TrimPrefix(fmt.Sprintf("%s/tcp/%d", acc.URL, port), "http")
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient: sc.client.http,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + acc.Token}},
	})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			return nil, decodeError(resp)
		}
		return nil, fmt.Errorf("port %d of %s: %w", port, sc.id, err)
	}
	ws.SetReadLimit(-1)
	// The conn outlives ctx, which only bounded the dial.
	return websocket.NetConn(context.Background(), ws, websocket.MessageBinary), nil
}
