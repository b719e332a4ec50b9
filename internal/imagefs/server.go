// Package imagefs serves images' files from the image store as a FUSE
// folder, <mount>/<image id>/<file>, read lazily: a page is read from the
// node's chunk cache, or fetched from the store on a miss, when something
// first reads it. A VM started from an image maps its RAM file from here
// copy-on-write, as it does a file in /dev/shm, and runs before the image
// has been fetched: only the pages the guest touches ever are.
//
// The server is a process of its own that outlives the VMs mapping its
// files (a fault on a page not read yet needs it) and can be restarted
// without unmounting under them: the FUSE connection is a file descriptor
// that another process keeps (SCM_RIGHTS, or an inherited fd); a new
// server adopts it, loads the same catalog from its state dir (so every
// node id means the same file) and asks the kernel to send again what the
// old one read and never answered (FUSE_NOTIFY_RESEND). docs/images.md
// says how a node runs it.
//
// It speaks the FUSE protocol itself rather than through go-fuse, whose
// server insists on the kernel's INIT as the first message of a
// connection and so cannot adopt one a previous server initialised.
package imagefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"syscall"

	"github.com/zeish/zeish/internal/imagestore"
)

// Server answers the kernel's requests for one mount.
type Server struct {
	store  *imagestore.Store
	state  string
	holder string
	log    *slog.Logger
	life   context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	bySeq   map[uint64]*image
	byID    map[string]*image
	nextSeq uint64
}

// Options configure a Server.
type Options struct {
	Store *imagestore.Store
	// State is the server's folder (its catalog); the same folder across
	// restarts.
	State string
	// Holder names this node in the store's read leases.
	Holder string
	Logger *slog.Logger
}

// New loads the catalog in o.State.
func New(o Options) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	life, stop := context.WithCancel(context.Background())
	s := &Server{store: o.Store, state: o.State, holder: o.Holder, log: o.Logger, life: life, stop: stop,
		bySeq: map[uint64]*image{}, byID: map[string]*image{}, nextSeq: 1}
	if err := s.load(); err != nil {
		stop()
		return nil, fmt.Errorf("imagefs state %s: %w", o.State, err)
	}
	return s, nil
}

// Close stops the server's background work (its holds stay until they
// expire, for whichever server takes over).
func (s *Server) Close() {
	s.stop()
	s.wg.Wait()
}

// Serve answers requests on dev, a FUSE connection (Mount's, or one a
// previous server served: resumed), until the file system is unmounted,
// dev is closed, or ctx ends. A resumed connection gets no INIT; the
// kernel is asked to send again what the previous server left unanswered.
func (s *Server) Serve(ctx context.Context, dev *os.File, resumed bool) error {
	conn := &conn{s: s, fd: int(dev.Fd())}
	defer runtime.KeepAlive(dev) // its finalizer would close the fd we serve
	if resumed {
		if err := conn.write(notify(notifyResend, nil)); err != nil {
			// Before Linux 6.9: nothing to resend with; requests the old
			// server read stay unanswered.
			s.log.Warn("imagefs: kernel cannot resend lost requests", "err", err)
		}
	} else if err := conn.init(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, readers)
	for range readers {
		go func() { errs <- conn.readLoop(ctx) }()
	}
	var first error
	for range readers {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	conn.inflight.Wait()
	return first
}

// readers read requests concurrently: a read that waits for the store
// holds one only until it is dispatched.
const readers = 4

// maxWrite is the largest write the kernel may send (we refuse writes,
// but must be able to read the request).
const maxWrite = 128 << 10

type conn struct {
	s        *Server
	fd       int // the connection; its *os.File is the caller's
	minor    uint32
	inflight sync.WaitGroup
}

func (c *conn) write(b []byte) error {
	_, err := syscall.Write(c.fd, b)
	return err
}

// readRequest reads one request, retrying what the kernel says to retry.
func (c *conn) readRequest(buf []byte) (int, error) {
	for {
		n, err := syscall.Read(c.fd, buf)
		switch {
		case err == nil:
			return n, nil
		case errors.Is(err, syscall.EINTR), errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.EAGAIN):
			continue // interrupted, or a request withdrawn before we read it
		case errors.Is(err, syscall.ENODEV):
			return 0, io.EOF // unmounted
		default:
			return 0, err
		}
	}
}

// init answers the kernel's first request, INIT.
func (c *conn) init() error {
	buf := make([]byte, maxWrite+4096)
	n, err := c.readRequest(buf)
	if err != nil {
		return fmt.Errorf("imagefs: read INIT: %w", err)
	}
	h, ok := parseInHeader(buf[:n])
	if !ok || h.Opcode != opInit || n < inHeaderSize+16 {
		return fmt.Errorf("imagefs: first request is opcode %d, not INIT", h.Opcode)
	}
	in := buf[inHeaderSize:n]
	major, minor, readahead, flags := le.Uint32(in[0:]), le.Uint32(in[4:]), le.Uint32(in[8:]), le.Uint32(in[12:])
	if major != kernelMajor || minor < minMinor {
		c.write(reply(h.Unique, syscall.EPROTO, nil))
		return fmt.Errorf("imagefs: kernel FUSE protocol %d.%d; want %d.%d or later", major, minor, kernelMajor, minMinor)
	}
	c.minor = min(minor, ourMinor)
	out := make([]byte, initOutSize)
	le.PutUint32(out[0:], kernelMajor)
	le.PutUint32(out[4:], c.minor)
	le.PutUint32(out[8:], readahead)
	le.PutUint32(out[12:], flags&(initAsyncRead|initParallelDirops|initMaxPages))
	le.PutUint16(out[16:], 64) // max_background
	le.PutUint16(out[18:], 48) // congestion_threshold
	le.PutUint32(out[20:], maxWrite)
	le.PutUint32(out[24:], 1)               // time_gran, ns
	le.PutUint16(out[28:], maxWrite/4096+1) // max_pages
	return c.write(reply(h.Unique, 0, out))
}

func (c *conn) readLoop(ctx context.Context) error {
	buf := make([]byte, maxWrite+4096)
	for ctx.Err() == nil {
		n, err := c.readRequest(buf)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("imagefs: read request: %w", err)
		}
		h, ok := parseInHeader(buf[:n])
		if !ok {
			continue
		}
		req := append([]byte(nil), buf[inHeaderSize:n]...)
		if h.Opcode == opDestroy {
			c.write(reply(h.Unique, 0, nil))
			return nil
		}
		c.inflight.Add(1)
		go func() {
			defer c.inflight.Done()
			c.dispatch(ctx, h, req)
		}()
	}
	return nil
}
