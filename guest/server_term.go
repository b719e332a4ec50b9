//go:build linux

package guest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/hashicorp/yamux"
	"github.com/zeish/zeish/errdefs"
	"golang.org/x/sys/unix"
)

// terminal is a process on a pseudo-terminal and what is kept of it while
// nobody is attached.
type terminal struct {
	pid  int
	argv []string
	user string
	ptmx *os.File // non-blocking, so the drain after exit can time out
	log  *slog.Logger

	readerDone chan struct{}
	done       chan struct{} // closed once the process is reaped and its output drained

	mu     sync.Mutex
	scroll []byte      // the last ScrollbackBytes of output (at most twice that before a trim)
	att    *attachment // nil while detached
	linger *time.Timer // runs while detached
	size   TermSize
	reaped bool // the pid may be recycled from here on: never signal it again
	result ExecResult
}

// attachment is one host stream following a terminal. Its lock orders the
// scrollback replay before any live output.
type attachment struct {
	mu     sync.Mutex
	w      *chunkWriter
	broken bool
	kicked chan struct{} // another attach took the terminal over
}

func (a *attachment) send(kind byte, p []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.broken && a.w.chunk(kind, p) != nil {
		a.broken = true
	}
}

func (s *Server) startTerminal(st *yamux.Stream, r *bufio.Reader, w *chunkWriter, req TermRequest) {
	t, err := s.spawnTerminal(req)
	if err != nil {
		w.fail(err)
		return
	}
	s.serveTerminal(r, w, t)
}

func (s *Server) attachTerminal(st *yamux.Stream, r *bufio.Reader, w *chunkWriter, pid int, size *TermSize) {
	s.mu.Lock()
	t := s.terms[pid]
	s.mu.Unlock()
	if t == nil {
		w.fail(fmt.Errorf("no terminal with pid %d (it never existed, or ended and was collected, or was detached longer than %s): %w",
			pid, TerminalLinger, errdefs.ErrNotFound))
		return
	}
	if size != nil {
		if err := size.Check(); err != nil {
			w.fail(err)
			return
		}
		t.resize(*size)
	}
	s.serveTerminal(r, w, t)
}

// serveTerminal attaches the stream, feeds its input to the terminal and
// ends with the exit result, or just detaches when the host goes away.
func (s *Server) serveTerminal(r *bufio.Reader, w *chunkWriter, t *terminal) {
	a := &attachment{w: w, kicked: make(chan struct{})}
	t.attach(a, s)
	inputDone := make(chan struct{})
	go func() {
		defer close(inputDone)
		t.feed(r)
	}()
	select {
	case <-t.done:
		t.mu.Lock()
		res := t.result
		t.mu.Unlock()
		a.mu.Lock()
		err := w.json(chunkResult, res)
		a.mu.Unlock()
		if err == nil {
			s.forgetTerminal(t) // its exit code is collected
		} else {
			t.detach(a, s)
		}
	case <-inputDone:
		t.detach(a, s)
	case <-a.kicked:
		w.fail(fmt.Errorf("terminal %d was attached by another client: %w", t.pid, errdefs.ErrInvalidState))
	}
}

func (s *Server) spawnTerminal(req TermRequest) (*terminal, error) {
	if err := req.Size.Check(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	n := len(s.terms)
	s.mu.Unlock()
	if n >= MaxTerminals {
		return nil, fmt.Errorf("terminal: %d terminals already (running, or exited with nobody collecting them): %w", n, errdefs.ErrLimitReached)
	}
	u, err := lookupUser(req.User)
	if err != nil {
		return nil, err
	}
	argv := req.Argv
	if len(argv) == 0 {
		argv = []string{u.loginShell(), "-l"}
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/"
		if fi, err := os.Stat(u.home); err == nil && fi.IsDir() {
			cwd = u.home
		}
	}
	env := map[string]string{"HOME": u.home, "USER": u.name, "LOGNAME": u.name, "SHELL": u.shell, "TERM": "xterm-256color"}
	for k, v := range req.Env {
		env[k] = v
	}
	cmd, err := s.command(ExecRequest{Argv: argv, Env: env, Cwd: cwd})
	if err != nil {
		return nil, err
	}
	attrs := &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if u.uid != 0 {
		attrs.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: append([]uint32{}, u.groups...)}
	}
	f, err := pty.StartWithAttrs(cmd, &pty.Winsize{Rows: uint16(req.Size.Rows), Cols: uint16(req.Size.Cols)}, attrs)
	if err != nil {
		return nil, execStartErr(argv[0], err)
	}
	ptmx, err := nonBlocking(f)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("terminal: %v: %w", err, errdefs.ErrInternal)
	}
	t := &terminal{
		pid: cmd.Process.Pid, argv: argv, user: u.name, ptmx: ptmx, size: req.Size,
		readerDone: make(chan struct{}), done: make(chan struct{}),
	}
	t.log = s.log.With("terminal", t.pid, "argv0", argv[0])
	s.mu.Lock()
	s.terms[t.pid] = t
	s.mu.Unlock()
	exited := make(chan struct{})
	go t.pumpOutput(exited)
	go t.wait(cmd, exited)
	t.log.Info("terminal started", "user", u.name, "rows", req.Size.Rows, "cols", req.Size.Cols)
	return t, nil
}

// nonBlocking swaps pty's master (which its ioctls put in blocking mode) for
// a non-blocking duplicate the runtime poller serves, so reads take deadlines.
func nonBlocking(f *os.File) (*os.File, error) {
	defer f.Close()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), nil
}

// pumpOutput copies the terminal's output to the scrollback and the attached
// host. After the process exits it reads on until the output is quiet for
// drainIdle (a background job may hold the terminal open forever).
func (t *terminal) pumpOutput(exited <-chan struct{}) {
	defer close(t.readerDone)
	buf := make([]byte, 32<<10)
	for {
		n, err := t.ptmx.Read(buf)
		if n > 0 {
			t.output(buf[:n])
		}
		if err != nil {
			return // EIO once every holder of the terminal is gone, or quiet after the exit
		}
		select {
		case <-exited:
			t.ptmx.SetReadDeadline(time.Now().Add(drainIdle))
		default:
		}
	}
}

func (t *terminal) output(p []byte) {
	t.mu.Lock()
	t.scroll = append(t.scroll, p...)
	if len(t.scroll) > 2*ScrollbackBytes {
		t.scroll = slices.Clone(t.scroll[len(t.scroll)-ScrollbackBytes:])
	}
	a := t.att
	t.mu.Unlock()
	if a != nil {
		a.send(chunkStdout, p)
	}
}

func (t *terminal) wait(cmd *exec.Cmd, exited chan struct{}) {
	began := time.Now()
	cmd.Wait()
	res := ExecResult{PID: t.pid, DurationMS: time.Since(began).Milliseconds()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.ExitCode, res.Signal = -1, unix.SignalName(ws.Signal())
	} else if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	} else {
		res.ExitCode = -1
	}
	t.mu.Lock()
	t.reaped = true
	t.mu.Unlock()
	close(exited)
	t.ptmx.SetReadDeadline(time.Now().Add(drainIdle))
	<-t.readerDone
	t.ptmx.Close()
	t.mu.Lock()
	t.result = res
	t.mu.Unlock()
	t.log.Info("terminal exited", "exit_code", res.ExitCode, "signal", res.Signal)
	close(t.done)
}

// attach makes a the terminal's one host: it replays the scrollback to a
// and then gets the live output. A previous host is told it lost the terminal.
func (t *terminal) attach(a *attachment, s *Server) {
	t.mu.Lock()
	if t.linger != nil {
		t.linger.Stop()
		t.linger = nil
	}
	old := t.att
	t.att = a
	replay := t.scroll[max(0, len(t.scroll)-ScrollbackBytes):]
	replay = slices.Clone(replay)
	a.mu.Lock() // before t.mu is released: live output waits for the replay
	t.mu.Unlock()
	defer a.mu.Unlock()
	if old != nil {
		close(old.kicked)
	}
	if a.w.json(chunkStarted, started{PID: t.pid}) != nil {
		a.broken = true
		return
	}
	for len(replay) > 0 && !a.broken {
		n := min(len(replay), maxChunk)
		if a.w.chunk(chunkStdout, replay[:n]) != nil {
			a.broken = true
		}
		replay = replay[n:]
	}
}

// detach lets go of a, if it is still the terminal's host, and starts the
// linger clock.
func (t *terminal) detach(a *attachment, s *Server) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.att != a {
		return
	}
	t.att = nil
	t.log.Info("terminal detached", "linger", TerminalLinger)
	t.linger = time.AfterFunc(s.termLinger(), func() { s.expireTerminal(t) })
}

// expireTerminal ends a terminal nobody came back for: the process group is
// hung up, then killed.
func (s *Server) expireTerminal(t *terminal) {
	t.mu.Lock()
	if t.att != nil {
		t.mu.Unlock()
		return
	}
	reaped := t.reaped
	t.mu.Unlock()
	s.forgetTerminal(t)
	if !reaped {
		t.log.Info("terminal expired: killing it")
		t.signalGroup(syscall.SIGHUP)
		time.AfterFunc(time.Second, func() { t.signalGroup(syscall.SIGKILL) })
	}
}

func (s *Server) forgetTerminal(t *terminal) {
	s.mu.Lock()
	if s.terms[t.pid] == t {
		delete(s.terms, t.pid)
	}
	s.mu.Unlock()
}

// termLinger is TerminalLinger unless a test shortened it.
func (s *Server) termLinger() time.Duration {
	if s.linger > 0 {
		return s.linger
	}
	return TerminalLinger
}

// signalGroup signals the session's process group while its leader is unreaped.
func (t *terminal) signalGroup(sig syscall.Signal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.reaped {
		syscall.Kill(-t.pid, sig)
	}
}

// feed applies the host's input until its stream ends.
func (t *terminal) feed(r *bufio.Reader) {
	var buf []byte
	for {
		kind, p, err := readChunk(r, buf)
		if err != nil {
			return
		}
		buf = p
		switch kind {
		case chunkData:
			if _, err := t.ptmx.Write(p); err != nil && !errors.Is(err, os.ErrClosed) {
				t.log.Debug("terminal input", "err", err)
			}
		case chunkResize:
			var size TermSize
			if json.Unmarshal(p, &size) != nil || size.Check() != nil {
				t.log.Warn("terminal resize refused", "size", string(p))
				continue
			}
			t.resize(size)
		case chunkSignal:
			t.signal(string(p))
		}
	}
}

func (t *terminal) resize(size TermSize) {
	t.mu.Lock()
	t.size = size
	t.mu.Unlock()
	ws := &unix.Winsize{Row: uint16(size.Rows), Col: uint16(size.Cols)}
	t.control(func(fd int) error { return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, ws) })
}

// signal sends sig to the terminal's foreground process group (what Ctrl-C
// would reach), or to the whole session when it has none.
func (t *terminal) signal(name string) {
	sig, err := parseSignal(name)
	if err != nil {
		t.log.Warn("terminal signal refused", "signal", name)
		return
	}
	pgrp := 0
	t.control(func(fd int) error {
		var err error
		pgrp, err = unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		return err
	})
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reaped {
		return
	}
	if pgrp <= 0 {
		pgrp = t.pid
	}
	syscall.Kill(-pgrp, sig)
}

// control runs an ioctl on the master without putting it in blocking mode.
func (t *terminal) control(f func(fd int) error) {
	sc, err := t.ptmx.SyscallConn()
	if err != nil {
		return
	}
	sc.Control(func(fd uintptr) {
		if err := f(int(fd)); err != nil {
			t.log.Debug("terminal ioctl", "err", err)
		}
	})
}

func (s *Server) terminals() []TermInfo {
	s.mu.Lock()
	terms := make([]*terminal, 0, len(s.terms))
	for _, t := range s.terms {
		terms = append(terms, t)
	}
	s.mu.Unlock()
	out := []TermInfo{}
	for _, t := range terms {
		t.mu.Lock()
		info := TermInfo{PID: t.pid, Argv: t.argv, User: t.user, Attached: t.att != nil, Size: t.size}
		select {
		case <-t.done:
			info.Exited = true
			res := t.result
			info.Result = &res
		default:
		}
		t.mu.Unlock()
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b TermInfo) int { return a.PID - b.PID })
	return out
}
