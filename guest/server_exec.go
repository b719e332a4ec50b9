//go:build linux

package guest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/zeish/zeish/errdefs"
	"golang.org/x/sys/unix"
)

// drainIdle is how long output pipes are still read after the process has
// exited once they go quiet: a background child that inherited stdout must
// not hold the exec open forever, but output already written is never cut.
const drainIdle = 200 * time.Millisecond

var defaultEnv = map[string]string{
	"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME": "/root",
	"USER": "root",
	"TERM": "xterm",
}

// runningExec is a started process that the host may cancel. The group is
// only signalled while its leader is unreaped, so a recycled pid is never hit.
type runningExec struct {
	pid    int
	mu     sync.Mutex
	exited bool
}

func (e *runningExec) killGroup(sig syscall.Signal) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.exited {
		syscall.Kill(-e.pid, sig)
	}
}

func (s *Server) exec(st *yamux.Stream, r *bufio.Reader, w *chunkWriter, req ExecRequest) {
	cmd, err := s.command(req)
	if err != nil {
		w.fail(err)
		return
	}
	stdin, stdinW, err := os.Pipe()
	if err != nil {
		w.fail(fmt.Errorf("exec: %v: %w", err, errdefs.ErrInternal))
		return
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		stdin.Close()
		stdinW.Close()
		w.fail(fmt.Errorf("exec: %v: %w", err, errdefs.ErrInternal))
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		stdin.Close()
		stdinW.Close()
		outR.Close()
		outW.Close()
		w.fail(fmt.Errorf("exec: %v: %w", err, errdefs.ErrInternal))
		return
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, outW, errW
	began := time.Now()
	err = cmd.Start()
	stdin.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		stdinW.Close()
		outR.Close()
		errR.Close()
		w.fail(execStartErr(req.Argv[0], err))
		return
	}
	proc := &runningExec{pid: cmd.Process.Pid}
	s.mu.Lock()
	s.execs[proc.pid] = proc
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.execs, proc.pid)
		s.mu.Unlock()
	}()
	log := s.log.With("pid", proc.pid, "argv0", req.Argv[0])
	w.json(chunkStarted, started{PID: proc.pid})

	var timedOut atomic.Bool
	if req.Timeout > 0 {
		timer := time.AfterFunc(req.Timeout, func() {
			timedOut.Store(true)
			proc.killGroup(syscall.SIGKILL)
		})
		defer timer.Stop()
	}
	exited := make(chan struct{})
	var pumps sync.WaitGroup
	pumps.Add(2)
	go pump(outR, kindWriter{w, chunkStdout}, exited, &pumps)
	go pump(errR, kindWriter{w, chunkStderr}, exited, &pumps)
	go s.feedStdin(st, r, stdinW, proc)

	waitErr := cmd.Wait()
	proc.mu.Lock()
	proc.exited = true
	proc.mu.Unlock()
	close(exited)
	outR.SetReadDeadline(time.Now().Add(drainIdle))
	errR.SetReadDeadline(time.Now().Add(drainIdle))
	pumps.Wait()

	res := ExecResult{PID: proc.pid, TimedOut: timedOut.Load(), DurationMS: time.Since(began).Milliseconds()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.ExitCode = -1
		res.Signal = unix.SignalName(ws.Signal())
	} else if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	} else {
		res.ExitCode = -1
		log.Warn("exec wait failed", "err", waitErr)
	}
	if err := w.json(chunkResult, res); err != nil {
		log.Info("exec result not delivered", "exit_code", res.ExitCode, "err", err)
	}
}

// feedStdin copies stdin chunks to the process. The stream ending before
// the result means the caller gave up (cancelled its ctx): the process group
// is killed. If instead the whole session is gone (host restart, VM fork),
// the process is left running.
func (s *Server) feedStdin(st *yamux.Stream, r *bufio.Reader, stdinW *os.File, proc *runningExec) {
	defer stdinW.Close()
	var buf []byte
	for {
		kind, p, err := readChunk(r, buf)
		if err != nil {
			if !st.Session().IsClosed() {
				proc.killGroup(syscall.SIGKILL)
				st.Close() // wakes writers blocked on a window the caller will never open
			}
			return
		}
		buf = p
		switch kind {
		case chunkData:
			if _, err := stdinW.Write(p); err != nil {
				stdinW.Close() // process closed its stdin; keep reading for cancellation
			}
		case chunkEOF:
			stdinW.Close()
		}
	}
}

// pump copies process output to the stream; once the stream is gone it
// keeps draining so the process never blocks on a full pipe.
func pump(r *os.File, w io.Writer, exited <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	defer r.Close()
	buf := make([]byte, 32<<10)
	discard, retried := false, false
	for {
		n, err := r.Read(buf)
		if n > 0 && !discard {
			if _, werr := w.Write(buf[:n]); werr != nil {
				discard = true
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && !retried {
			// The deadline set at the exit may have passed before this
			// goroutine ran at all (a busy guest): Go then fails the read
			// without trying it, and output still in the pipe would be
			// lost. One more read on a fresh deadline really looks.
			retried = true
			r.SetReadDeadline(time.Now().Add(drainIdle))
			continue
		}
		if err != nil {
			return // EOF, or quiet for drainIdle after the exit
		}
		retried = false
		select {
		case <-exited:
			r.SetReadDeadline(time.Now().Add(drainIdle))
		default:
		}
	}
}

// command validates req and builds the process.
func (s *Server) command(req ExecRequest) (*exec.Cmd, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return nil, fmt.Errorf("exec: empty argv: %w", errdefs.ErrInvalidArgument)
	}
	if req.Timeout < 0 {
		return nil, fmt.Errorf("exec: negative timeout: %w", errdefs.ErrInvalidArgument)
	}
	s.mu.Lock()
	userSpec, defCwd := s.user, s.cwd
	s.mu.Unlock()
	if req.User != "" {
		userSpec = req.User
	}
	u, err := lookupUser(userSpec)
	if err != nil {
		return nil, err
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = defCwd
	}
	if cwd == "" {
		cwd = u.home
		if _, err := os.Stat(cwd); err != nil {
			cwd = "/"
		}
	}
	if !filepath.IsAbs(cwd) {
		return nil, fmt.Errorf("exec: working directory %q is not absolute: %w", cwd, errdefs.ErrInvalidArgument)
	}
	if fi, err := os.Stat(cwd); err != nil {
		return nil, fsErr("exec: working directory", cwd, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("exec: working directory %s: not a directory: %w", cwd, errdefs.ErrInvalidArgument)
	}
	env := s.execEnv(u, req.Env)
	path, err := lookPath(req.Argv[0], cwd, env["PATH"])
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        req.Argv,
		Dir:         cwd,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}, // timeouts and cancels kill the whole group
	}
	if u.uid != 0 || u.gid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	return cmd, nil
}

func (s *Server) execEnv(u execUser, req map[string]string) map[string]string {
	env := maps.Clone(defaultEnv)
	env["HOME"], env["USER"] = u.home, u.name
	s.mu.Lock()
	maps.Copy(env, s.env)
	s.mu.Unlock()
	maps.Copy(env, req)
	return env
}

// lookPath resolves argv[0] with the exec's own PATH and cwd (os/exec would
// use the agent's).
func lookPath(name, cwd, pathEnv string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("exec %s: %v: %w", name, err, errdefs.Of(err))
		}
		return p, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec %s: executable file not found in $PATH: %w", name, errdefs.ErrFileNotFound)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &classified{"no such file or directory", errdefs.ErrFileNotFound}
	case err != nil:
		return &classified{err.Error(), errdefs.ErrInternal}
	case fi.IsDir():
		return &classified{"is a directory", errdefs.ErrInvalidArgument}
	case fi.Mode()&0o111 == 0:
		return &classified{"permission denied (not executable)", errdefs.ErrInvalidArgument}
	}
	return nil
}

type classified struct {
	msg   string
	class *errdefs.Error
}

func (c *classified) Error() string { return c.msg }
func (c *classified) Unwrap() error { return c.class }

func execStartErr(name string, err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("exec %s: %v: %w", name, err, errdefs.ErrFileNotFound)
	case errors.Is(err, syscall.ENOEXEC), errors.Is(err, os.ErrPermission):
		return fmt.Errorf("exec %s: %v: %w", name, err, errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("exec %s: %v: %w", name, err, errdefs.ErrInternal)
}
