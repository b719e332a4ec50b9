package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/zeish/zeish/errdefs"
)

// Terminal is the host's end of a guest terminal. Output is copied to the
// writer given when it was opened; Done closes when the process has ended
// (Result then tells how) or the stream broke. Closing it, or cancelling the
// ctx it was opened with, only detaches: the process keeps running in the
// guest and can be attached again by its PID.
type Terminal struct {
	cl   *call
	pid  int
	out  io.Writer
	done chan struct{}
	res  ExecResult
	err  error
}

// Terminal starts req on a new pseudo-terminal in the guest.
func (c *Client) Terminal(ctx context.Context, req TermRequest, out io.Writer) (*Terminal, error) {
	if err := req.Size.Check(); err != nil {
		return nil, err
	}
	cl, err := c.start(ctx, request{Op: opTerm, Term: &req})
	if err != nil {
		return nil, err
	}
	return openTerminal(cl, out)
}

// AttachTerminal attaches to the terminal of pid, replaying its scrollback
// to out first; size, when set, resizes it. Another host attached to it is
// cut off (its Result reports invalid_state).
func (c *Client) AttachTerminal(ctx context.Context, pid int, size *TermSize, out io.Writer) (*Terminal, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("attach terminal: bad pid %d: %w", pid, errdefs.ErrInvalidArgument)
	}
	if size != nil {
		if err := size.Check(); err != nil {
			return nil, err
		}
	}
	cl, err := c.start(ctx, request{Op: opAttach, PID: pid, Size: size})
	if err != nil {
		return nil, err
	}
	return openTerminal(cl, out)
}

// Terminals lists the guest's terminals: running ones and exited ones whose
// result nobody collected yet.
func (c *Client) Terminals(ctx context.Context) ([]TermInfo, error) {
	var list []TermInfo
	err := c.roundTrip(ctx, request{Op: opTerms}, &list)
	return list, err
}

func openTerminal(cl *call, out io.Writer) (*Terminal, error) {
	kind, p, err := cl.next()
	if err != nil {
		cl.close()
		return nil, err
	}
	var s started
	if kind != chunkStarted || json.Unmarshal(p, &s) != nil {
		cl.close()
		return nil, fmt.Errorf("terminal: unexpected first chunk %q: %w", kind, errdefs.ErrInternal)
	}
	if out == nil {
		out = io.Discard
	}
	t := &Terminal{cl: cl, pid: s.PID, out: out, done: make(chan struct{})}
	go t.read()
	return t, nil
}

func (t *Terminal) read() {
	defer close(t.done)
	for {
		kind, p, err := t.cl.next()
		if err != nil {
			t.err = err
			return
		}
		switch kind {
		case chunkStdout:
			t.out.Write(p)
		case chunkResult:
			if err := json.Unmarshal(p, &t.res); err != nil {
				t.err = fmt.Errorf("terminal: decode result: %v: %w", err, errdefs.ErrInternal)
			}
			return
		}
	}
}

// PID is the terminal process's pid in the guest; attach again with it.
func (t *Terminal) PID() int { return t.pid }

// Done is closed when the process ended or the stream broke.
func (t *Terminal) Done() <-chan struct{} { return t.done }

// Result is how the process ended, once Done is closed; an error means the
// stream broke (the process may still run) or another host took over.
func (t *Terminal) Result() (ExecResult, error) {
	<-t.done
	return t.res, t.err
}

// Write sends keyboard input.
func (t *Terminal) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := t.cl.w.chunk(chunkData, p); err != nil {
		return 0, t.cl.client.transportErr(t.cl.ctx, "terminal input", err)
	}
	return len(p), nil
}

// Resize changes the window size; the guest's foreground process gets SIGWINCH.
func (t *Terminal) Resize(size TermSize) error {
	if err := size.Check(); err != nil {
		return err
	}
	if err := t.cl.w.json(chunkResize, size); err != nil {
		return t.cl.client.transportErr(t.cl.ctx, "terminal resize", err)
	}
	return nil
}

// Signal sends a signal ("INT", "TERM", …) to the terminal's foreground
// process group, as the keyboard would.
func (t *Terminal) Signal(name string) error {
	if err := CheckSignal(name); err != nil {
		return err
	}
	if err := t.cl.w.chunk(chunkSignal, []byte(name)); err != nil {
		return t.cl.client.transportErr(t.cl.ctx, "terminal signal", err)
	}
	return nil
}

// Close detaches; the process goes on in the guest.
func (t *Terminal) Close() error {
	t.cl.close()
	return nil
}
