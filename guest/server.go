//go:build linux

package guest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/zeish/zeish/errdefs"
)

// portEOFRetry is how long the agent waits before reading the port again
// after a read of 0 bytes (no host attached).
const portEOFRetry = 20 * time.Millisecond

// Server is the agent: it answers the host's requests inside the guest.
type Server struct {
	log     *slog.Logger
	version string
	sys     system

	mu    sync.Mutex
	env   map[string]string // Config.Env, the default environment of execs
	user  string            // Config.User, the default user of execs
	cwd   string            // Config.Cwd, the default working folder
	execs map[int]*runningExec
	terms map[int]*terminal
	desk  desktopState
	// linger overrides TerminalLinger (tests).
	linger time.Duration
	git    gitCreds
}

// NewServer returns an agent that reports version in Info.
func NewServer(log *slog.Logger, version string) *Server {
	return &Server{log: log, version: version, sys: realSystem(), execs: map[int]*runningExec{}, terms: map[int]*terminal{}}
}

// ServePort serves a virtio-serial port for as long as ctx lives. The port
// stays open across hosts: end of file only means that no host is attached.
// ServePort closes port when ctx ends.
func (s *Server) ServePort(ctx context.Context, port io.ReadWriteCloser) error {
	return s.serve(ctx, port, portEOFRetry)
}

// ServeConn serves one stream connection (a unix socket in tests and
// development) until it ends.
func (s *Server) ServeConn(ctx context.Context, conn io.ReadWriteCloser) error {
	return s.serve(ctx, conn, 0)
}

func (s *Server) serve(ctx context.Context, port io.ReadWriteCloser, eofRetry time.Duration) error {
	stop := context.AfterFunc(ctx, func() { port.Close() })
	defer stop()
	fr := newFrameReader(port)
	fr.eofRetry = eofRetry
	fr.stop = ctx.Done()
	out := &frameWriter{w: port}
	var cur *sessConn
	var lastReset uint64
	defer func() {
		if cur != nil {
			cur.Close()
		}
	}()
	for {
		f, err := fr.next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read agent port: %w", err)
		}
		if fr.skipped > 0 {
			s.log.Warn("skipped bytes that were not a valid frame", "bytes", fr.skipped)
			fr.skipped = 0
		}
		switch {
		case f.session == 0:
		case f.kind == frameHello:
			if cur == nil || cur.id != f.session {
				// A new host (zeishd restarted, or this VM is a fresh clone
				// resumed in another QEMU). The old session's streams fail;
				// their processes go on with their output discarded.
				if cur != nil {
					s.log.Info("host session replaced", "old", fmt.Sprintf("%016x", cur.id), "new", fmt.Sprintf("%016x", f.session))
					cur.Close()
				}
				cur = newSessConn(f.session, out)
				mux, err := yamux.Server(cur, muxConfig(s.log))
				if err != nil {
					return err
				}
				go s.accept(mux)
			}
			if err := out.write(frame{kind: frameHelloAck, session: f.session}); err != nil && eofRetry == 0 {
				return fmt.Errorf("write agent port: %w", err)
			}
		case f.kind != frameData:
		case cur != nil && f.session == cur.id:
			cur.deliver(f.payload) // fails only once yamux has given up on cur
		default:
			// Data of a session we never greeted: someone else owns the wire
			// now, so the current session cannot be talking to its host.
			if cur != nil {
				s.log.Info("data from an unknown session; dropping the current one")
				cur.Close()
				cur = nil
			}
			if f.session != lastReset {
				lastReset = f.session
				out.write(frame{kind: frameReset, session: f.session})
			}
		}
	}
}

func (s *Server) accept(mux *yamux.Session) {
	defer mux.Close()
	for {
		st, err := mux.AcceptStream()
		if err != nil {
			return
		}
		go s.handle(st)
	}
}

// handle serves one request stream.
func (s *Server) handle(st *yamux.Stream) {
	defer st.Close()
	r := bufio.NewReaderSize(st, 64<<10)
	w := &chunkWriter{w: st}
	line, err := r.ReadBytes('\n')
	if err != nil {
		return
	}
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		w.fail(fmt.Errorf("bad request header: %v: %w", err, errdefs.ErrInvalidArgument))
		return
	}
	log := s.log.With("op", req.Op)
	var res any
	switch req.Op {
	case opExec:
		if req.Exec == nil {
			err = fmt.Errorf("exec: no command: %w", errdefs.ErrInvalidArgument)
			break
		}
		s.exec(st, r, w, *req.Exec)
		return
	case opTerm:
		if req.Term == nil {
			err = fmt.Errorf("terminal: no request: %w", errdefs.ErrInvalidArgument)
			break
		}
		s.startTerminal(st, r, w, *req.Term)
		return
	case opAttach:
		s.attachTerminal(st, r, w, req.PID, req.Size)
		return
	case opTerms:
		res = s.terminals()
	case opWatch:
		s.watchDir(st, r, w, req.Path, req.Recursive)
		return
	case opReadFile:
		s.readFile(st, r, w, req.Path)
		return
	case opWriteFile:
		res, err = s.writeFile(r, req.Path, req.Perm, req.User, req.Metadata, req.Meta)
	case opInfo:
		res, err = s.info()
	case opConfigure:
		if req.Config == nil {
			err = fmt.Errorf("configure: no config: %w", errdefs.ErrInvalidArgument)
			break
		}
		err = s.configure(*req.Config)
	case opStat:
		res, err = stat(req.Path, req.Meta)
	case opList:
		res, err = list(req.Path, req.Meta)
	case opStats:
		res, err = systemStats()
	case opMkdir:
		res, err = mkdir(req.Path, req.Parents)
	case opRemove:
		err = remove(req.Path, req.Recursive)
	case opProcesses:
		res, err = processes()
	case opKill:
		err = s.kill(req.PID, req.Signal, req.Group)
	case opDesktop:
		if req.Desktop == nil {
			err = fmt.Errorf("desktop: no action: %w", errdefs.ErrInvalidArgument)
			break
		}
		res, err = s.desktopAction(*req.Desktop)
	case opDesktopStatus:
		res, err = s.desktopStatus()
	case opDesktopShot:
		s.desktopShot(st, r, w)
		return
	default:
		err = fmt.Errorf("unknown operation %q: %w", req.Op, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		log.Debug("request failed", "err", err)
		w.fail(err)
		return
	}
	if err := w.json(chunkResult, res); err != nil {
		w.fail(err)
	}
}
