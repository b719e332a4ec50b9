package guest

import (
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

var errSessionClosed = errors.New("guest channel session closed")

// frameWriter serialises whole frames onto the port: frames of an old and a
// new session may interleave, but never inside a frame.
type frameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

func (fw *frameWriter) write(f frame) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.buf = appendFrame(fw.buf[:0], f)
	_, err := fw.w.Write(fw.buf)
	return err
}

// sessConn is the byte stream of one session, the conn yamux runs over.
// Writes become DATA frames tagged with the session; the frame reader feeds
// the payloads of this session's DATA frames to Read.
type sessConn struct {
	id     uint64
	out    *frameWriter
	pr     *io.PipeReader
	pw     *io.PipeWriter
	once   sync.Once
	closed chan struct{}
}

func newSessConn(id uint64, out *frameWriter) *sessConn {
	pr, pw := io.Pipe()
	return &sessConn{id: id, out: out, pr: pr, pw: pw, closed: make(chan struct{})}
}

func (c *sessConn) Read(p []byte) (int, error) { return c.pr.Read(p) }

func (c *sessConn) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		select {
		case <-c.closed:
			return written, errSessionClosed
		default:
		}
		n := min(len(p), maxFramePayload)
		if err := c.out.write(frame{kind: frameData, session: c.id, payload: p[:n]}); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// deliver hands one DATA payload to the session's reader (yamux).
func (c *sessConn) deliver(p []byte) error {
	_, err := c.pw.Write(p)
	return err
}

func (c *sessConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.pr.CloseWithError(errSessionClosed)
		c.pw.CloseWithError(errSessionClosed)
	})
	return nil
}

// muxConfig is the yamux configuration of both ends. A paused or migrating VM
// stops answering for as long as it is paused, and that must not break the
// session, so keepalives are off and the timeouts that would close the
// session are disabled or generous.
func muxConfig(log *slog.Logger) *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.EnableKeepAlive = false
	cfg.ConnectionWriteTimeout = 5 * time.Minute
	cfg.StreamOpenTimeout = 0 // yamux closes the whole session when it fires
	cfg.StreamCloseTimeout = 5 * time.Minute
	cfg.MaxStreamWindowSize = 1 << 20
	cfg.LogOutput = nil
	cfg.Logger = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	return cfg
}
