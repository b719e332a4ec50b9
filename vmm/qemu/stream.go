package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// State files go through unix sockets that zeishd serves or dials, not
// through exec: URIs: those spawn a shell and cat inside the pause, which
// costs tens of milliseconds on a busy host.

// stateSink accepts QEMU's outgoing migration on a unix socket and writes it
// to a file.
type stateSink struct {
	ln   net.Listener
	path string
	done chan error
}

func newStateSink(sock, path string) (*stateSink, error) {
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("state socket: %w", err)
	}
	s := &stateSink{ln: ln, path: path, done: make(chan error, 1)}
	go s.serve()
	return s, nil
}

func (s *stateSink) serve() {
	conn, err := s.ln.Accept()
	if err != nil {
		s.done <- err
		return
	}
	defer conn.Close()
	// 0600 and never through a symlink: a full state file holds guest RAM.
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		s.done <- err
		return
	}
	_, err = io.Copy(f, conn)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	s.done <- err
}

// wait returns once the whole stream is on disk (QEMU closed it).
func (s *stateSink) wait(ctx context.Context) error {
	defer s.close()
	select {
	case err := <-s.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(migrateTimeout):
		return errors.New("state stream did not end")
	}
}

func (s *stateSink) close() {
	s.ln.Close()
	os.Remove(s.ln.Addr().String())
}

// feedState streams a state file into QEMU's incoming socket.
func feedState(ctx context.Context, sock, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return fmt.Errorf("incoming socket: %w", err)
	}
	defer conn.Close()
	if _, err := io.Copy(conn, f); err != nil {
		return fmt.Errorf("feed state: %w", err)
	}
	return nil
}

// relay accepts connections on a socket and pipes each, both ways, to a new
// connection to another socket: a migration with multifd opens several.
// A buffered relay reads ahead of a slow reader: see copyAhead.
type relay struct {
	ln       net.Listener
	buffered bool
	mu       sync.Mutex
	conns    []net.Conn
}

func newRelay(sock, target string, buffered bool) (*relay, error) {
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("relay socket: %w", err)
	}
	r := &relay{ln: ln, buffered: buffered}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("unix", target)
			if err != nil {
				in.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, in, out)
			r.mu.Unlock()
			go pipe(in.(*net.UnixConn), out.(*net.UnixConn), r.buffered)
		}
	}()
	return r, nil
}

// pipe copies both ways until both directions ended.
func pipe(in, out *net.UnixConn, buffered bool) {
	defer in.Close()
	defer out.Close()
	copyFn := func(dst, src *net.UnixConn) { io.Copy(dst, src) }
	if buffered {
		copyFn = func(dst, src *net.UnixConn) { copyAhead(dst, src) }
	}
	done := make(chan struct{}, 2)
	go func() { copyFn(out, in); out.CloseWrite(); done <- struct{}{} }()
	go func() { copyFn(in, out); in.CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

// Read-ahead of a buffered relay, per direction of a connection.
const (
	relayChunk  = 256 << 10
	relayChunks = 64 // up to 16 MiB in flight
)

// copyAhead copies src to dst with a reader that does not wait for the
// writer while fewer than relayChunks chunks are in flight. A live
// capture's receiver writes guest pages into tmpfs holes, which on a host
// where every first touch of a page is slow (docs/fork.md) makes it the
// slowest party: with only the sockets' own buffers between them, the
// source's last pass waited for the receiver to work off the pass before
// it, inside the pause. Read ahead, the source hands its last pass over and
// resumes while the receiver catches up; the image is complete when the
// receiver is done, as before.
func copyAhead(dst io.Writer, src io.Reader) {
	full := make(chan []byte, relayChunks)
	free := make(chan []byte, relayChunks)
	made := 0
	var werr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		for b := range full {
			if werr == nil {
				_, werr = dst.Write(b)
			}
			free <- b[:cap(b)]
		}
	}()
	for {
		var b []byte
		select {
		case b = <-free:
		default:
			if made < relayChunks {
				b, made = make([]byte, relayChunk), made+1
			} else {
				b = <-free
			}
		}
		n, err := src.Read(b)
		if n > 0 {
			full <- b[:n]
		} else {
			free <- b
		}
		if err != nil {
			break
		}
	}
	close(full)
	<-written
}

// close stops accepting and cuts every connection still open.
func (r *relay) close() {
	r.ln.Close()
	os.Remove(r.ln.Addr().String())
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
}
