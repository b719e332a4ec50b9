package zeish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/coder/websocket"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
)

// TermInfo describes one of a sandbox's terminals.
type TermInfo = guest.TermInfo

// TerminalRequest starts a process on a pseudo-terminal in the sandbox (an
// exec with a TTY).
type TerminalRequest struct {
	// Argv empty runs the user's login shell.
	Argv []string
	Env  map[string]string
	Cwd  string // default: the user's home
	User string // default: root
	Rows int    // window size in character cells, 1..1000
	Cols int
}

// Terminal is an interactive process in a sandbox. Read its output, Write
// keystrokes (Ctrl-C is "\x03"), Resize it with the window. Close only
// detaches: the process keeps running in the sandbox, and AttachTerminal with
// its PID (within 10 minutes) picks it up again with its recent output.
type Terminal struct {
	conn   *websocket.Conn
	pid    int
	cancel context.CancelFunc
	out    *io.PipeReader

	done     chan struct{}
	res      ExecResult
	err      error
	refusals chan error

	writeMu sync.Mutex
}

// Terminal opens a new terminal.
func (sc *SandboxConn) Terminal(ctx context.Context, req TerminalRequest) (*Terminal, error) {
	size := guest.TermSize{Rows: req.Rows, Cols: req.Cols}
	if err := size.Check(); err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("rows", strconv.Itoa(req.Rows))
	q.Set("cols", strconv.Itoa(req.Cols))
	for _, a := range req.Argv {
		q.Add("argv", a)
	}
	for k, v := range req.Env {
		q.Add("env", k+"="+v)
	}
	if req.Cwd != "" {
		q.Set("cwd", req.Cwd)
	}
	if req.User != "" {
		q.Set("user", req.User)
	}
	return sc.dialTerminal(ctx, "/terminals/connect", q)
}

// AttachTerminal re-attaches to the terminal of pid; rows and cols (both 0:
// keep its size) resize it. Its recent output (up to 64 KiB) is replayed
// first. A client still attached to it is cut off.
func (sc *SandboxConn) AttachTerminal(ctx context.Context, pid, rows, cols int) (*Terminal, error) {
	q := url.Values{}
	if rows != 0 || cols != 0 {
		if err := (guest.TermSize{Rows: rows, Cols: cols}).Check(); err != nil {
			return nil, err
		}
		q.Set("rows", strconv.Itoa(rows))
		q.Set("cols", strconv.Itoa(cols))
	}
	return sc.dialTerminal(ctx, "/terminals/"+strconv.Itoa(pid)+"/connect", q)
}

// Terminals lists the sandbox's terminals: running ones, and exited ones
// whose exit code no client has collected yet.
func (sc *SandboxConn) Terminals(ctx context.Context) ([]TermInfo, error) {
	var list api.TerminalList
	if err := sc.call(ctx, request{method: http.MethodGet}, "/terminals", &list); err != nil {
		return nil, err
	}
	return list.Terminals, nil
}

// dialTerminal connects the WebSocket; ctx bounds only the dial (the
// terminal lives until it exits or is closed).
func (sc *SandboxConn) dialTerminal(ctx context.Context, path string, q url.Values) (*Terminal, error) {
	for attempt := 0; ; attempt++ {
		acc, err := sc.token(ctx, attempt > 0)
		if err != nil {
			return nil, err
		}
		target := acc.URL + path
		if len(q) > 0 {
			target += "?" + q.Encode()
		}
		h := http.Header{}
		h.Set("Authorization", "Bearer "+acc.Token)
		h.Set("User-Agent", sc.client.userAgent)
		conn, resp, err := websocket.Dial(ctx, target, &websocket.DialOptions{HTTPHeader: h, HTTPClient: sc.client.http})
		if err != nil {
			if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
				err = decodeError(resp)
				if attempt == 0 && errors.Is(err, errdefs.ErrTokenExpired) {
					continue
				}
				return nil, err
			}
			return nil, fmt.Errorf("zeish: terminal: %w", err)
		}
		return startTerminal(conn)
	}
}

func startTerminal(conn *websocket.Conn) (*Terminal, error) {
	ctx, cancel := context.WithCancel(context.Background())
	typ, p, err := conn.Read(ctx)
	var ev api.TermEvent
	if err == nil && (typ != websocket.MessageText || json.Unmarshal(p, &ev) != nil || ev.Type != api.TermEventStarted) {
		err = fmt.Errorf("unexpected first message %q", p)
	}
	if err != nil {
		cancel()
		conn.CloseNow()
		return nil, fmt.Errorf("zeish: terminal: %w", err)
	}
	pr, pw := io.Pipe()
	t := &Terminal{conn: conn, pid: ev.PID, cancel: cancel, out: pr, done: make(chan struct{}), refusals: make(chan error, 16)}
	go t.read(ctx, pw)
	return t, nil
}

func (t *Terminal) read(ctx context.Context, pw *io.PipeWriter) {
	defer close(t.done)
	defer pw.Close()
	for {
		typ, p, err := t.conn.Read(ctx)
		if err != nil {
			t.err = fmt.Errorf("zeish: terminal connection ended before the process did: %w", err)
			return
		}
		if typ == websocket.MessageBinary {
			if _, err := pw.Write(p); err != nil {
				t.err = fmt.Errorf("zeish: terminal output: %w", err)
				return
			}
			continue
		}
		var ev api.TermEvent
		if json.Unmarshal(p, &ev) != nil {
			continue
		}
		switch ev.Type {
		case api.TermEventExit:
			if ev.Result != nil {
				t.res = *ev.Result
			}
			return
		case api.TermEventError, api.TermEventRefused:
			var e error = &APIError{Status: http.StatusOK, Code: errdefs.ErrInternal.Code}
			if ev.Error != nil {
				e = &APIError{Status: http.StatusOK, Code: ev.Error.Code, Message: ev.Error.Message}
			}
			if ev.Type == api.TermEventError {
				t.err = e
				return
			}
			select {
			case t.refusals <- e:
			default:
			}
		}
	}
}

// PID is the terminal's process id in the sandbox.
func (t *Terminal) PID() int { return t.pid }

// Read reads the terminal's output; io.EOF once the process has ended (or the
// connection is gone: Wait tells which). Output must be read for the terminal
// to make progress.
func (t *Terminal) Read(p []byte) (int, error) { return t.out.Read(p) }

// Write sends keyboard input.
func (t *Terminal) Write(p []byte) (int, error) {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	written := 0
	for len(p) > 0 {
		n := min(len(p), 32<<10)
		if err := t.conn.Write(context.Background(), websocket.MessageBinary, p[:n]); err != nil {
			return written, fmt.Errorf("zeish: terminal input: %w", err)
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

func (t *Terminal) control(ctx context.Context, m api.TermControl) error {
	b, _ := json.Marshal(m)
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	if err := t.conn.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("zeish: terminal %s: %w", m.Type, err)
	}
	return nil
}

// Resize sets the window size; the foreground program gets SIGWINCH.
func (t *Terminal) Resize(ctx context.Context, rows, cols int) error {
	if err := (guest.TermSize{Rows: rows, Cols: cols}).Check(); err != nil {
		return err
	}
	return t.control(ctx, api.TermControl{Type: api.TermControlResize, Rows: rows, Cols: cols})
}

// Signal sends a signal ("INT", "TERM", …) to the terminal's foreground
// process group.
func (t *Terminal) Signal(ctx context.Context, signal string) error {
	if err := guest.CheckSignal(signal); err != nil {
		return err
	}
	return t.control(ctx, api.TermControl{Type: api.TermControlSignal, Signal: signal})
}

// Refusals reports control messages the server refused (the terminal goes on).
func (t *Terminal) Refusals() <-chan error { return t.refusals }

// Done is closed when the process has ended or the connection is gone.
func (t *Terminal) Done() <-chan struct{} { return t.done }

// Wait waits for the process to end and returns how it did. An error means
// the connection ended first (the process may still run: attach again) or
// another client took the terminal over.
func (t *Terminal) Wait(ctx context.Context) (ExecResult, error) {
	select {
	case <-t.done:
		return t.res, t.err
	case <-ctx.Done():
		return ExecResult{}, ctx.Err()
	}
}

// Close detaches from the terminal; its process goes on in the sandbox.
func (t *Terminal) Close() error {
	t.conn.Close(websocket.StatusNormalClosure, "detach")
	t.cancel()
	t.out.Close()
	return nil
}
