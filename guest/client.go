package guest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/zeish/zeish/errdefs"
	"golang.org/x/sync/semaphore"
)

// DialFunc opens a fresh connection to the host end of the agent's port
// (for QEMU, the unix socket of its virtio-serial chardev).
type DialFunc func(ctx context.Context) (net.Conn, error)

// Option configures Connect.
type Option func(*clientOptions)

type clientOptions struct {
	log        *slog.Logger
	retryDelay time.Duration
}

// WithLogger sets the logger of the client and its yamux session.
func WithLogger(l *slog.Logger) Option { return func(o *clientOptions) { o.log = l } }

// WithRetryDelay sets the pause between failed dials (default 50 ms).
func WithRetryDelay(d time.Duration) Option { return func(o *clientOptions) { o.retryDelay = d } }

// maxOpenStreams bounds a client's calls in flight. yamux blocks OpenStream,
// with no way to cancel it, once 256 streams wait for the guest to accept
// them (a stuck or hostile guest never does); below that, a call waits for
// a slot as long as its ctx allows.
const maxOpenStreams = 128

// Replies larger than bigReply (JSON results, up to maxJSONChunk) are held
// against one budget shared by every client of this process, so no number of
// concurrent calls, or of guests answering with huge replies, can take the
// host's memory: a reply waits for budget as long as its ctx allows.
const (
	bigReply        = 64 << 10
	replyBudgetSize = 4 * maxJSONChunk
)

var replyBudget = semaphore.NewWeighted(replyBudgetSize)

// Client is the host's side of the channel to one guest agent. It is safe
// for concurrent use; every call runs on its own yamux stream.
type Client struct {
	conn    net.Conn
	mux     *yamux.Session
	log     *slog.Logger
	streams chan struct{} // a slot per call in flight
}

// Connect dials (retrying the dial too: the socket may not exist yet) and
// handshakes until the agent answers or ctx ends (then an error wrapping
// errdefs.ErrUnavailable). ctx bounds only the connection phase.
func Connect(ctx context.Context, dial DialFunc, opts ...Option) (*Client, error) {
	o := clientOptions{log: slog.Default(), retryDelay: 50 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	var lastErr error
	for {
		if ctx.Err() != nil {
			if lastErr == nil {
				lastErr = ctx.Err()
			}
			return nil, fmt.Errorf("connect to guest agent: %v: %w", lastErr, errdefs.ErrUnavailable)
		}
		conn, err := dial(ctx)
		if err == nil {
			var c *Client
			if c, err = handshake(ctx, conn, o); err == nil {
				return c, nil
			}
			conn.Close()
		}
		lastErr = err
		select {
		case <-ctx.Done():
		case <-time.After(o.retryDelay):
		}
	}
}

// handshake repeats HELLO(session) until the guest acknowledges that
// session, then runs a yamux client over it.
func handshake(ctx context.Context, conn net.Conn, o clientOptions) (*Client, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	id := binary.BigEndian.Uint64(b[:]) | 1 // never 0: the guest's "no session"
	out := &frameWriter{w: conn}
	sess := newSessConn(id, out)
	acked := make(chan struct{})
	readDone := make(chan error, 1)
	go func() {
		err := readHostFrames(newFrameReader(conn), sess, acked)
		sess.Close()
		conn.Close()
		readDone <- err
	}()

	// A blocked write (the guest has not opened its port yet and the socket
	// buffer is full) must not outlive ctx.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	ticker := time.NewTicker(helloInterval)
	defer ticker.Stop()
	hello := frame{kind: frameHello, session: id, payload: helloPadding}
	for waiting := true; waiting; {
		if err := out.write(hello); err != nil {
			stop()
			return nil, fmt.Errorf("send hello: %w", err)
		}
		select {
		case <-acked:
			waiting = false
		case err := <-readDone:
			stop()
			return nil, fmt.Errorf("wait for hello ack: %w", err)
		case <-ticker.C:
		}
	}
	if !stop() {
		return nil, ctx.Err()
	}
	mux, err := yamux.Client(sess, muxConfig(o.log))
	if err != nil {
		return nil, err
	}
	o.log.Debug("guest agent connected", "session", fmt.Sprintf("%016x", id))
	return &Client{conn: conn, mux: mux, log: o.log, streams: make(chan struct{}, maxOpenStreams)}, nil
}

// readHostFrames feeds this session's DATA to yamux, less the streams the
// guest opens, and ignores everything else: frames of other sessions,
// repeated acks, garbage.
func readHostFrames(fr *frameReader, sess *sessConn, acked chan struct{}) error {
	var once sync.Once
	var guard inboundGuard
	for {
		f, err := fr.next()
		if err != nil {
			return err
		}
		if f.session != sess.id {
			continue
		}
		switch f.kind {
		case frameHelloAck:
			once.Do(func() { close(acked) })
		case frameData:
			// Streams the guest opens never reach yamux (inbound.go).
			if p := guard.filter(f.payload); len(p) > 0 {
				if err := sess.deliver(p); err != nil {
					return err
				}
			}
		case frameReset:
			return errors.New("the agent no longer has this session (it restarted or another host took over)")
		}
	}
}

// Done is closed when the channel is broken; the Client is then useless and
// the caller should Connect again.
func (c *Client) Done() <-chan struct{} { return c.mux.CloseChan() }

// Close ends the session. Guest processes started by Exec keep running.
func (c *Client) Close() error {
	err := c.mux.Close()
	c.conn.Close()
	return err
}

// call is one request on its own stream.
type call struct {
	client *Client
	op     string
	ctx    context.Context
	st     *yamux.Stream
	r      *bufio.Reader
	w      *chunkWriter
	stop   func() bool
	buf    []byte
	held   int64 // bytes of replyBudget the last chunk holds
	closed sync.Once
}

func (c *Client) start(ctx context.Context, req request) (*call, error) {
	if err := ctx.Err(); err != nil {
		return nil, c.transportErr(ctx, req.Op, err)
	}
	select {
	case c.streams <- struct{}{}:
	case <-ctx.Done():
		return nil, c.transportErr(ctx, req.Op, ctx.Err())
	case <-c.mux.CloseChan():
		return nil, c.transportErr(ctx, req.Op, yamux.ErrSessionShutdown)
	}
	st, err := c.openStream(ctx)
	if err != nil {
		return nil, c.transportErr(ctx, req.Op, err)
	}
	// Cancelling ctx wakes blocked reads and writes and half-closes the
	// stream, which the guest takes as "caller gone" (an exec is killed).
	stop := context.AfterFunc(ctx, func() {
		st.SetDeadline(time.Now())
		st.Close()
	})
	cl := &call{client: c, op: req.Op, ctx: ctx, st: st, r: bufio.NewReaderSize(st, 64<<10), w: &chunkWriter{w: st}, stop: stop}
	line, err := json.Marshal(req)
	if err != nil {
		cl.close()
		return nil, fmt.Errorf("guest %s: %v: %w", req.Op, err, errdefs.ErrInvalidArgument)
	}
	if _, err := st.Write(append(line, '\n')); err != nil {
		cl.close()
		return nil, c.transportErr(ctx, req.Op, err)
	}
	return cl, nil
}

// openStream opens a stream on the call's slot, giving the slot back on
// failure. yamux's OpenStream cannot be cancelled: it waits while its accept
// backlog is full, and a stream the guest never accepted keeps its place
// there after Close until yamux's close timeout. So a caller whose ctx ends
// first leaves, and the slot is given back only once OpenStream returns
// (its stream closed at once): the client stays bounded, callers do not wait.
func (c *Client) openStream(ctx context.Context) (*yamux.Stream, error) {
	type opened struct {
		st  *yamux.Stream
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		st, err := c.mux.OpenStream()
		ch <- opened{st, err}
	}()
	select {
	case o := <-ch:
		if o.err != nil {
			<-c.streams
		}
		return o.st, o.err
	case <-ctx.Done():
		go func() {
			if o := <-ch; o.st != nil {
				o.st.Close()
			}
			<-c.streams
		}()
		return nil, ctx.Err()
	}
}

func (cl *call) close() {
	cl.closed.Do(func() {
		cl.stop()
		cl.st.Close()
		cl.release()
		<-cl.client.streams
	})
}

// release gives back the budget of the last big chunk, and its buffer.
func (cl *call) release() {
	if cl.held > 0 {
		replyBudget.Release(cl.held)
		cl.held, cl.buf = 0, nil
	}
}

// next reads the next chunk; a chunkError becomes the guest's error. The
// chunk's payload is valid until the next call.
func (cl *call) next() (byte, []byte, error) {
	cl.release()
	kind, n, err := readChunkHeader(cl.r)
	if err != nil {
		return 0, nil, cl.client.transportErr(cl.ctx, cl.op, err)
	}
	return cl.body(kind, n)
}

// body reads the payload of a chunk whose header next read.
func (cl *call) body(kind byte, n int) (byte, []byte, error) {
	if n > bigReply {
		if err := replyBudget.Acquire(cl.ctx, int64(n)); err != nil {
			return 0, nil, cl.client.transportErr(cl.ctx, cl.op, err)
		}
		cl.held, cl.buf = int64(n), nil
	}
	kind, p, err := readChunkBody(cl.r, cl.buf, kind, n)
	if err != nil {
		return 0, nil, cl.client.transportErr(cl.ctx, cl.op, err)
	}
	cl.buf = p
	if kind == chunkError {
		var we wireError
		if err := json.Unmarshal(p, &we); err != nil {
			return 0, nil, fmt.Errorf("guest %s: bad error chunk: %v: %w", cl.op, err, errdefs.ErrInternal)
		}
		return 0, nil, fromWire(we)
	}
	return kind, p, nil
}

// result reads the single result chunk of a call into out.
func (cl *call) result(out any) error {
	kind, p, err := cl.next()
	if err != nil {
		return err
	}
	if kind != chunkResult {
		return fmt.Errorf("guest %s: unexpected chunk %q: %w", cl.op, kind, errdefs.ErrInternal)
	}
	if out == nil {
		return nil
	}
	if err := checkDecodedSize(cl.op, p); err != nil {
		return err
	}
	if err := json.Unmarshal(p, out); err != nil {
		return fmt.Errorf("guest %s: decode result: %v: %w", cl.op, err, errdefs.ErrInternal)
	}
	return nil
}

// transportErr classifies a failure of the channel itself (as opposed to an
// error the agent reported).
func (c *Client) transportErr(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(ctxErr, context.DeadlineExceeded) {
			return fmt.Errorf("guest %s: %w: %w", op, errdefs.ErrTimeout, ctxErr)
		}
		return fmt.Errorf("guest %s: %w", op, ctxErr)
	}
	return fmt.Errorf("guest %s: channel to the agent failed: %v: %w", op, err, errdefs.ErrUnavailable)
}

func (c *Client) roundTrip(ctx context.Context, req request, out any) error {
	cl, err := c.start(ctx, req)
	if err != nil {
		return err
	}
	defer cl.close()
	return cl.result(out)
}

// Info reports the guest's kernel, hostname, boot id, uptime and agent version.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var info Info
	err := c.roundTrip(ctx, request{Op: opInfo}, &info)
	return info, err
}

// Configure applies the post-boot/fork/restore duties (clock, RNG, hostname,
// network, default env). It is idempotent.
func (c *Client) Configure(ctx context.Context, cfg Config) error {
	return c.roundTrip(ctx, request{Op: opConfigure, Config: &cfg}, nil)
}

// Stat describes path without following a final symlink.
func (c *Client) Stat(ctx context.Context, path string) (FileInfo, error) {
	var fi FileInfo
	err := c.roundTrip(ctx, request{Op: opStat, Path: path}, &fi)
	return fi, err
}

// List returns the entries of a directory.
func (c *Client) List(ctx context.Context, path string) ([]FileInfo, error) {
	var list []FileInfo
	err := c.roundTrip(ctx, request{Op: opList, Path: path}, &list)
	return list, err
}

// StatMeta is Stat with the file's user metadata (FileInfo.Metadata).
func (c *Client) StatMeta(ctx context.Context, path string) (FileInfo, error) {
	var fi FileInfo
	err := c.roundTrip(ctx, request{Op: opStat, Path: path, Meta: true}, &fi)
	return fi, err
}

// ListMeta is List with each entry's user metadata.
func (c *Client) ListMeta(ctx context.Context, path string) ([]FileInfo, error) {
	var list []FileInfo
	err := c.roundTrip(ctx, request{Op: opList, Path: path, Meta: true}, &list)
	return list, err
}

// Stats reads the guest's CPU time, memory and root disk use. An agent too
// old for it answers errdefs.ErrInvalidArgument ("unknown operation").
func (c *Client) Stats(ctx context.Context) (SystemStats, error) {
	var st SystemStats
	err := c.roundTrip(ctx, request{Op: opStats}, &st)
	return st, err
}

// Mkdir creates a directory (and its parents if asked).
func (c *Client) Mkdir(ctx context.Context, path string, parents bool) (FileInfo, error) {
	var fi FileInfo
	err := c.roundTrip(ctx, request{Op: opMkdir, Path: path, Parents: parents}, &fi)
	return fi, err
}

// Remove deletes a file or an empty directory, or a whole tree if recursive.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	return c.roundTrip(ctx, request{Op: opRemove, Path: path, Recursive: recursive}, nil)
}

// Processes lists the guest's processes.
func (c *Client) Processes(ctx context.Context) ([]Process, error) {
	var ps []Process
	err := c.roundTrip(ctx, request{Op: opProcesses}, &ps)
	return ps, err
}

// Kill sends a signal ("KILL", "TERM", "INT", … or with a SIG prefix) to pid.
func (c *Client) Kill(ctx context.Context, pid int, signal string) error {
	return c.roundTrip(ctx, request{Op: opKill, PID: pid, Signal: signal}, nil)
}

// fileModePerm keeps WriteFile's default in one place.
func fileModePerm(perm os.FileMode) uint32 {
	if perm == 0 {
		return 0o644
	}
	return uint32(perm.Perm())
}
