//go:build linux

package guest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest/desktop"
)

// desktopStartTimeout bounds an X server's start: Xvfb compiles its keymap
// first, which takes seconds on a TCG guest.
const desktopStartTimeout = 2 * time.Minute

// desktopState is the sandbox's desktop: what the host asked for and the
// session running it.
type desktopState struct {
	mu   sync.Mutex // held while a session starts or stops
	cfg  *desktop.Config
	sess *desktop.Session
	log  *os.File
}

// configureDesktop makes the running desktop match cfg: started when asked
// for, kept when it already runs as asked (a fork or restore of a machine
// with a desktop), stopped when no longer asked for (a fork with desktop:
// false).
func (s *Server) configureDesktop(cfg *desktop.Config) error {
	d := &s.desk
	d.mu.Lock()
	defer d.mu.Unlock()
	if cfg == nil {
		d.cfg = nil
		d.stop()
		return nil
	}
	c := cfg.WithDefaults()
	if err := c.Check(); err != nil {
		return err
	}
	d.cfg = &c
	if d.sess != nil && d.sess.Alive() && d.sess.Config() == c {
		return nil
	}
	return s.startDesktop()
}

// startDesktop (re)starts the session of d.cfg; the caller holds d.mu.
func (s *Server) startDesktop() error {
	d := &s.desk
	d.stop()
	u, err := lookupUser(d.cfg.User)
	if err != nil {
		return fmt.Errorf("desktop: %w", err)
	}
	who := desktop.Identity{Name: u.name, Home: u.home}
	if u.uid != 0 {
		who.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}
	}
	var log io.Writer = io.Discard
	if err := os.MkdirAll(startDir, 0o755); err == nil {
		if f, err := os.OpenFile(filepath.Join(startDir, "desktop.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			d.log, log = f, f
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), desktopStartTimeout)
	defer cancel()
	start := time.Now()
	sess, err := desktop.Start(ctx, *d.cfg, who, log)
	if err != nil {
		d.stop()
		return fmt.Errorf("desktop: %w", err)
	}
	d.sess = sess
	s.log.Info("desktop started", "display", d.cfg.Display, "size", fmt.Sprintf("%dx%d", d.cfg.Width, d.cfg.Height),
		"window_manager", sess.WindowManager(), "user", u.name, "ms", time.Since(start).Milliseconds())
	return nil
}

func (d *desktopState) stop() {
	if d.sess != nil {
		d.sess.Stop()
		d.sess = nil
	}
	if d.log != nil {
		d.log.Close()
		d.log = nil
	}
}

// session is the running desktop, started again if its X server died.
func (s *Server) session() (*desktop.Session, error) {
	d := &s.desk
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cfg == nil {
		return nil, fmt.Errorf("this sandbox has no desktop: %w", errdefs.ErrDesktopNotEnabled)
	}
	if d.sess == nil || !d.sess.Alive() {
		s.log.Warn("desktop: X server not running; starting it again")
		if err := s.startDesktop(); err != nil {
			return nil, err
		}
	}
	return d.sess, nil
}

func (s *Server) desktopAction(a desktop.Action) (desktop.Result, error) {
	sess, err := s.session()
	if err != nil {
		return desktop.Result{}, err
	}
	if a.Action == desktop.ActionCursorPosition {
		return sess.Display.Cursor()
	}
	return sess.Display.Do(a)
}

func (s *Server) desktopStatus() (desktop.Status, error) {
	sess, err := s.session()
	if err != nil {
		return desktop.Status{}, err
	}
	c := sess.Config()
	return desktop.Status{Running: sess.Alive(), Display: c.Display, Width: c.Width, Height: c.Height, Depth: c.Depth,
		WindowManager: sess.WindowManager(), User: c.User}, nil
}

// desktopShot answers with the PNG's size, then its bytes as data chunks
// and an EOF chunk. It is encoded whole first, so a failure is an error
// reply rather than a cut image.
func (s *Server) desktopShot(st *yamux.Stream, r *bufio.Reader, w *chunkWriter) {
	sess, err := s.session()
	if err != nil {
		w.fail(err)
		return
	}
	var png bytes.Buffer
	if err := sess.Display.Screenshot(&png); err != nil {
		w.fail(err)
		return
	}
	go func() {
		io.Copy(io.Discard, r)
		st.Close()
	}()
	size := sess.Display.Size()
	if err := w.json(chunkResult, ScreenshotInfo{Width: size.Width, Height: size.Height, Size: int64(png.Len())}); err != nil {
		return
	}
	for b := png.Bytes(); len(b) > 0; {
		n := min(len(b), maxChunk)
		if err := w.chunk(chunkData, b[:n]); err != nil {
			return
		}
		b = b[n:]
	}
	w.chunk(chunkEOF, nil)
}
