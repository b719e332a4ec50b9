package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeish/zeish/errdefs"
)

// DataPlaneLimits bound how long a guest may keep a connection without
// answering or a splice may sit silent. A guest is untrusted and so is
// whoever calls its public ports: neither may hold the server's
// connections. How many calls each sandbox and account may hold at once is
// the application's (control.CallLimits).
type DataPlaneLimits struct {
	// PortHeaders is how long a guest port may take to send a response's
	// headers (then 503 timeout); 0: no limit.
	PortHeaders time.Duration
	// Idle ends a TCP forward, a WebSocket to a guest port or a proxied
	// response that moved no byte either way for this long; 0: never.
	Idle time.Duration
}

// DefaultDataPlane are the limits when the configuration names none.
var DefaultDataPlane = DataPlaneLimits{
	PortHeaders: time.Minute,
	Idle:        10 * time.Minute,
}

// portTransport reaches guest ports. Connections are not kept between
// requests: an idle one belongs to a guest address, which a later sandbox
// may get. A connection that moves nothing for l.Idle is closed (a
// WebSocket upgraded through the proxy included).
func portTransport(l DataPlaneLimits) *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return closeWhenIdle(c, l.Idle), nil
		},
		ResponseHeaderTimeout: l.PortHeaders,
		DisableKeepAlives:     true,
		DisableCompression:    true,
	}
}

// portError is what a client gets when the guest's port failed it.
func portError(port int, id string, l DataPlaneLimits, err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("port %d of sandbox %s did not answer in time (response headers within %s): %w", port, id, l.PortHeaders, errdefs.ErrTimeout)
	}
	return fmt.Errorf("port %d of sandbox %s: %v: %w", port, id, err, errdefs.ErrUnavailable)
}

// idleConn closes its connection once idle has passed without a byte read
// or written.
type idleConn struct {
	net.Conn
	last atomic.Int64 // unix nanoseconds of the last byte either way
	done chan struct{}
	once sync.Once
}

// closeWhenIdle watches c; idle 0 leaves it alone.
func closeWhenIdle(c net.Conn, idle time.Duration) net.Conn {
	if idle <= 0 {
		return c
	}
	ic := &idleConn{Conn: c, done: make(chan struct{})}
	ic.last.Store(time.Now().UnixNano())
	go ic.watch(idle)
	return ic
}

func (c *idleConn) watch(idle time.Duration) {
	t := time.NewTimer(idle)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			quiet := time.Since(time.Unix(0, c.last.Load()))
			if quiet >= idle {
				c.Close()
				return
			}
			t.Reset(idle - quiet)
		}
	}
}

func (c *idleConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *idleConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *idleConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.Conn.Close()
}

// Splice copies both ways until either side ends, then closes both: a
// client that goes ends the splice even if the guest stays silent, and a
// guest that ends it ends the client's. (Over the WebSocket of /tcp there
// is no half-close to keep: its client closing means it is gone.)
func Splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
}
