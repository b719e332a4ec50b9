//go:build linux

package guest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// gitCreds is the agent's side of the git credential helper (gitcred.go):
// the credential in memory and the socket that hands it out.
type gitCreds struct {
	mu     sync.Mutex
	auth   *GitAuth
	uid    uint32 // auth.User's uid: the only caller besides root
	ln     *net.UnixListener
	socket string // where it listens (credentialSocket)
}

// setGitAuth keeps a (nil forgets it), listening on the socket while one is
// set. The socket is the user's (0600) and every caller's uid is checked
// again on its connection (SO_PEERCRED), so another account's process gets
// nothing even if it reaches the socket.
func (s *Server) setGitAuth(a *GitAuth) error {
	g := &s.git
	g.mu.Lock()
	defer g.mu.Unlock()
	if a == nil {
		g.auth = nil
		if g.ln != nil {
			g.ln.Close()
			g.ln = nil
		}
		return nil
	}
	u, err := lookupUser(a.User)
	if err != nil {
		return err
	}
	if g.socket == "" {
		g.socket = credentialSocket
	}
	cp := *a
	g.auth, g.uid = &cp, u.uid
	// Listen anew after a restore or cold boot (/run is a tmpfs, the file
	// may be gone), or when the user changed.
	if g.ln != nil {
		if fi, err := os.Stat(g.socket); err == nil {
			if st, ok := fi.Sys().(*unix.Stat_t); ok && st.Uid == u.uid {
				return nil
			}
		}
		g.ln.Close()
		g.ln = nil
	}
	if err := os.MkdirAll(filepath.Dir(g.socket), 0o755); err != nil {
		return err
	}
	os.Remove(g.socket)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: g.socket, Net: "unix"})
	if err != nil {
		return err
	}
	ln.SetUnlinkOnClose(false) // a replaced listener must not remove its successor's file
	if err := errors.Join(os.Chmod(g.socket, 0o600), os.Chown(g.socket, int(u.uid), int(u.gid))); err != nil {
		ln.Close()
		return err
	}
	g.ln = ln
	go s.serveGitCreds(ln)
	return nil
}

func (s *Server) serveGitCreds(ln *net.UnixListener) {
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		go s.answerGitCred(conn)
	}
}

func (s *Server) answerGitCred(conn *net.UnixConn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	uid, err := peerUID(conn)
	if err != nil {
		return
	}
	req := parseCredential(conn)
	s.git.mu.Lock()
	auth, allowed := s.git.auth, s.git.uid
	s.git.mu.Unlock()
	if uid != 0 && uid != allowed {
		s.log.Warn("git credential refused", "uid", uid)
		return
	}
	io.WriteString(conn, answerCredential(auth, req))
}

// peerUID is the uid of the process at the other end of conn.
func peerUID(conn *net.UnixConn) (uint32, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return cred.Uid, nil
}
