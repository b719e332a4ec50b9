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
type relay struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newRelay(sock, target string) (*relay, error) {
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("relay socket: %w", err)
	}
	r := &relay{ln: ln}
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
			go pipe(in.(*net.UnixConn), out.(*net.UnixConn))
		}
	}()
	return r, nil
}

// pipe copies both ways until both directions ended.
func pipe(in, out *net.UnixConn) {
	defer in.Close()
	defer out.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(out, in); out.CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(in, out); in.CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
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
