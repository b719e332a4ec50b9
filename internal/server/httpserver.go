package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/zeish/zeish/api"
)

// Limits bound what one client can hold of the server: time to send
// headers and a body, time to take a response, idle keep-alive time, and the
// number of open connections. Streams (the data plane's exec output, file
// transfers, guest ports and terminals, and the events feed) are exempt
// from the body and response deadlines by design: they live as long as
// their work, and are bounded per sandbox and per account instead
// (DataPlaneLimits), and cut when they stall: a read of the body or a
// write of the response that makes no progress for StreamIdle ends it.
type Limits struct {
	ReadHeader time.Duration // request line and headers
	Body       time.Duration // a control-plane request's body
	Write      time.Duration // a control-plane response, waits included
	Idle       time.Duration // a keep-alive connection between requests
	StreamIdle time.Duration // one read of a stream's body or write of its response
	MaxConns   int           // open connections; more wait in the kernel's backlog
	// Streams, when set, names the streams of the server's other front
	// ends (E2B's envd, sandbox host names) and of host-named guest ports:
	// exempt like the data plane's.
	Streams func(*http.Request) bool
}

// DefaultLimits suit a node's API: a wait may last 600 s, so responses get
// more than that.
var DefaultLimits = Limits{
	ReadHeader: 10 * time.Second,
	Body:       30 * time.Second,
	Write:      11 * time.Minute,
	Idle:       2 * time.Minute,
	StreamIdle: 10 * time.Minute,
	MaxConns:   1024,
}

// HTTPServer returns an http.Server for h with l applied, and the listener
// it must serve, capped at l.MaxConns connections.
func HTTPServer(ln net.Listener, h http.Handler, l Limits) (*http.Server, net.Listener) {
	hs := &http.Server{
		Handler:           deadlines(h, l),
		ReadHeaderTimeout: l.ReadHeader,
		IdleTimeout:       l.Idle,
		MaxHeaderBytes:    64 << 10,
	}
	if l.MaxConns > 0 {
		ln = &limitListener{Listener: ln, slots: make(chan struct{}, l.MaxConns), closed: make(chan struct{})}
	}
	return hs, ln
}

// isStream says whether a request is one whose body or response may take
// as long as its work does.
func isStream(r *http.Request, l Limits) bool {
	return strings.HasPrefix(r.URL.Path, api.DataPath+"/") ||
		(r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/events")) ||
		(l.Streams != nil && l.Streams(r))
}

// deadlines sets each request's own read and write deadlines: the server's
// ReadTimeout and WriteTimeout would apply to streams too.
func deadlines(h http.Handler, l Limits) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if isStream(r, l) {
			h.ServeHTTP(asStream(w, r, l.StreamIdle))
			return
		}
		if l.Write > 0 {
			rc.SetWriteDeadline(time.Now().Add(l.Write))
		}
		// A deadline left on the connection once the body is read would
		// end the request: net/http then watches the connection for the
		// client going away, and takes the timeout for that (a wait would
		// be cancelled). So the deadline covers the body alone.
		if l.Body > 0 && r.Body != nil && r.Body != http.NoBody {
			rc.SetReadDeadline(time.Now().Add(l.Body))
			r.Body = &bodyDeadline{ReadCloser: r.Body, rc: rc}
		}
		h.ServeHTTP(w, r)
	})
}

// bodyDeadline lifts the read deadline once the body has been read.
type bodyDeadline struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *bodyDeadline) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

type streamKey struct{}

// asStream lifts the server's read and write deadlines off a request that
// may take as long as its work (once: a request already made a stream is
// left as it is) and cuts it only when a read or write stalls for idle
// (0: never). A handler that learns late that it serves a stream (a guest
// port by its host name) calls it too.
func asStream(w http.ResponseWriter, r *http.Request, idle time.Duration) (http.ResponseWriter, *http.Request) {
	if r.Context().Value(streamKey{}) != nil {
		return w, r
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	rc.SetWriteDeadline(time.Time{})
	r = r.WithContext(context.WithValue(r.Context(), streamKey{}, true))
	if idle <= 0 {
		return w, r
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &stallBody{ReadCloser: r.Body, rc: rc, idle: idle}
	}
	return &stallWriter{ResponseWriter: w, rc: rc, idle: idle}, r
}

// stallBody bounds each read of a stream's body: a client that sends
// nothing for idle is cut. The deadline is lifted after every read, so
// neither a pause of the handler nor net/http's watch for the client
// going away (once the body is read) trips over it.
type stallBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	idle time.Duration
}

func (b *stallBody) Read(p []byte) (int, error) {
	b.rc.SetReadDeadline(time.Now().Add(b.idle))
	n, err := b.ReadCloser.Read(p)
	b.rc.SetReadDeadline(time.Time{})
	return n, err
}

// stallWriter bounds each write of a stream's response: a client that
// takes nothing for idle is cut. Between writes there is no deadline, so
// a stream that has nothing to say (a quiet command) lives on.
type stallWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	idle time.Duration
}

func (s *stallWriter) Write(p []byte) (n int, err error) {
	s.bounded(func() { n, err = s.ResponseWriter.Write(p) })
	return n, err
}

func (s *stallWriter) Flush() { s.bounded(func() { s.rc.Flush() }) }

// bounded runs one write under the stall deadline, and lifts it after.
func (s *stallWriter) bounded(write func()) {
	s.rc.SetWriteDeadline(time.Now().Add(s.idle))
	defer s.rc.SetWriteDeadline(time.Time{})
	write()
}

func (s *stallWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// limitListener accepts at most cap(slots) connections at once.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}
