//go:build linux

package desktop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/zeish/zeish/errdefs"
)

// WindowManagers are the window managers a desktop starts, the first one
// the guest has: light ones, as templates with a desktop carry. Without any
// the desktop still works, with undecorated windows that do not take the
// focus on a click.
var WindowManagers = []string{"openbox", "matchbox-window-manager", "fluxbox", "jwm", "icewm", "xfwm4", "twm"}

// toolDirs is where Xvfb and the window manager are looked for: sandboxd
// runs as PID 1 with no PATH of its own.
var toolDirs = []string{"/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin"}

// Identity is who the desktop's processes run as.
type Identity struct {
	Credential *syscall.Credential // nil: the caller's own
	Home       string
	Name       string
}

// Session is a running desktop: Xvfb, a window manager and the agent's
// connection to the display.
type Session struct {
	cfg     Config
	xvfb    *exec.Cmd
	exited  chan struct{}
	wm      *exec.Cmd
	wmName  string
	Display *Display
}

// Start runs Xvfb on cfg's display as who, waits until it accepts
// connections (or until ctx ends, or Xvfb exits: then its last words are in
// the error), then starts the first window manager of WindowManagers it
// finds. log receives both programs' output.
func Start(ctx context.Context, cfg Config, who Identity, log io.Writer) (_ *Session, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	num, _ := displayNumber(cfg.Display)
	if log == nil {
		log = io.Discard
	}
	// Xvfb's and the window manager's output may be copied by goroutines
	// of their own when log is not a file.
	log = &lockedWriter{w: log}
	xvfb, err := findTool("Xvfb")
	if err != nil {
		return nil, err
	}
	// Xvfb makes its socket folder itself, but as a user it would own it
	// and then refuse it; root makes it as X expects.
	if err := os.MkdirAll("/tmp/.X11-unix", 0o1777); err == nil {
		os.Chmod("/tmp/.X11-unix", 0o1777)
	}
	clearStaleLock(num)
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + who.Home, "USER=" + who.Name, "LOGNAME=" + who.Name, "DISPLAY=" + cfg.Display}
	s := &Session{cfg: cfg, exited: make(chan struct{})}
	s.xvfb = command(xvfb, []string{cfg.Display, "-screen", "0", fmt.Sprintf("%dx%dx%d", cfg.Width, cfg.Height, cfg.Depth),
		"-nolisten", "tcp", "-dpi", "96", "+extension", "XTEST"}, who, env, log)
	tail := &tailWriter{w: log}
	s.xvfb.Stderr = tail
	if err := s.xvfb.Start(); err != nil {
		return nil, fmt.Errorf("start Xvfb: %v: %w", err, errdefs.ErrInternal)
	}
	go func() {
		s.xvfb.Wait()
		close(s.exited)
	}()
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for s.Display == nil {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("Xvfb did not accept connections on %s in time: %w", cfg.Display, errdefs.ErrTimeout)
		case <-s.exited:
			return nil, fmt.Errorf("Xvfb exited: %s: %w", strings.TrimSpace(tail.String()), errdefs.ErrInternal)
		case <-tick.C:
		}
		if _, err := os.Stat(fmt.Sprintf("/tmp/.X11-unix/X%d", num)); err != nil {
			continue
		}
		if d, err := Open(cfg.Display); err == nil {
			s.Display = d
		}
	}
	for _, name := range WindowManagers {
		if p, err := findTool(name); err == nil {
			s.wm, s.wmName = command(p, nil, who, env, log), name
			if err := s.wm.Start(); err != nil {
				fmt.Fprintf(log, "zeish: window manager %s: %v\n", name, err)
				s.wm, s.wmName = nil, ""
			} else {
				wmGone := make(chan struct{})
				go func() {
					s.wm.Wait()
					close(wmGone)
				}()
				// The desktop is ready when its window manager is: a window
				// opened before that may never show.
				if err := s.Display.AwaitWindowManager(ctx, wmGone); err != nil {
					fmt.Fprintf(log, "zeish: window manager %s did not take the screen: %v\n", name, err)
				}
			}
			break
		}
	}
	return s, nil
}

// Config is what the session runs.
func (s *Session) Config() Config { return s.cfg }

// WindowManager names the window manager started ("" if none).
func (s *Session) WindowManager() string { return s.wmName }

// Alive reports whether Xvfb still runs.
func (s *Session) Alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Stop ends the window manager and Xvfb (TERM, then KILL after 2 s) and
// closes the connection.
func (s *Session) Stop() {
	if s.Display != nil {
		s.Display.Close()
	}
	if s.wm != nil && s.wm.Process != nil {
		s.wm.Process.Kill()
	}
	if s.xvfb.Process == nil {
		return
	}
	s.xvfb.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(2 * time.Second):
		s.xvfb.Process.Kill()
		<-s.exited
	}
}

func command(path string, args []string, who Identity, env []string, log io.Writer) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Dir = who.Home
	if _, err := os.Stat(who.Home); who.Home == "" || err != nil {
		cmd.Dir = "/"
	}
	cmd.Stdout, cmd.Stderr = log, log
	// Its own session: a desktop outlives the request that started it and
	// gets no signal meant for the agent's group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: who.Credential}
	return cmd
}

func findTool(name string) (string, error) {
	for _, dir := range toolDirs {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not installed in this sandbox (a desktop needs a template that has it, e.g. desktop): %w", name, errdefs.ErrInvalidArgument)
}

// clearStaleLock removes the lock file and socket of a display whose X
// server is gone (a machine booted again from a disk that kept /tmp), which
// would stop a new Xvfb from taking the display.
func clearStaleLock(num int) {
	lock := fmt.Sprintf("/tmp/.X%d-lock", num)
	b, err := os.ReadFile(lock)
	if err != nil {
		return
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			return
		}
	}
	os.Remove(lock)
	os.Remove(fmt.Sprintf("/tmp/.X11-unix/X%d", num))
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// tailWriter passes writes on and keeps the last 2 KiB for error messages.
type tailWriter struct {
	w   io.Writer
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2048 {
		t.buf = t.buf[len(t.buf)-2048:]
	}
	if t.w != nil {
		t.w.Write(p)
	}
	return len(p), nil
}

func (t *tailWriter) String() string { return string(t.buf) }
