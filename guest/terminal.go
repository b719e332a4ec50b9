package guest

import (
	"fmt"
	"strings"
	"time"

	"github.com/zeish/zeish/errdefs"
)

// Terminals are execs on a pseudo-terminal. Unlike a plain exec, a
// terminal's process outlives the stream that started it: when the caller
// goes away (a dropped WebSocket, a zeishd restart) the terminal is only
// detached; its output keeps going into a bounded scrollback, and an attach by
// pid within TerminalLinger replays that scrollback and carries on, like tmux.
const (
	// TerminalLinger is how long a detached terminal is kept: past it the
	// process group is hung up and killed and the terminal is forgotten. A
	// terminal whose process already exited is kept as long, so a caller
	// that lost its connection can still collect the exit code.
	TerminalLinger = 10 * time.Minute
	// ScrollbackBytes bounds the output kept for a re-attach.
	ScrollbackBytes = 64 << 10
	// MaxTerminalSize bounds rows and columns (a window is never that big;
	// larger values are a client bug).
	MaxTerminalSize = 1000
	// MaxTerminals bounds the terminals a guest keeps (running or uncollected):
	// each holds a pseudo-terminal and a scrollback.
	MaxTerminals = 64
)

// TermRequest starts a process on a new pseudo-terminal.
type TermRequest struct {
	// Argv empty means the user's login shell (from /etc/passwd; /bin/sh
	// when that is missing or a nologin placeholder).
	Argv []string          `json:"argv,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
	Cwd  string            `json:"cwd,omitempty"` // default: the user's home
	User string            `json:"user,omitempty"`
	Size TermSize          `json:"size"`
}

// TermSize is a window size in character cells.
type TermSize struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// Check refuses sizes no terminal has.
func (s TermSize) Check() error {
	if s.Rows < 1 || s.Cols < 1 || s.Rows > MaxTerminalSize || s.Cols > MaxTerminalSize {
		return fmt.Errorf("terminal size %dx%d: rows and cols must be within 1..%d: %w",
			s.Rows, s.Cols, MaxTerminalSize, errdefs.ErrInvalidArgument)
	}
	return nil
}

// TermInfo describes a live (or exited, not yet collected) terminal.
type TermInfo struct {
	PID      int         `json:"pid"`
	Argv     []string    `json:"argv"`
	User     string      `json:"user"`
	Attached bool        `json:"attached"`
	Exited   bool        `json:"exited"`
	Result   *ExecResult `json:"result,omitempty"`
	Size     TermSize    `json:"size"`
}

// signalNames are the guest's (always Linux) signals a terminal accepts by name.
var signalNames = map[string]bool{
	"HUP": true, "INT": true, "QUIT": true, "KILL": true, "USR1": true, "USR2": true, "PIPE": true,
	"ALRM": true, "TERM": true, "CONT": true, "STOP": true, "TSTP": true, "WINCH": true,
}

// CheckSignal accepts "INT", "SIGINT" or "int" style names of the signals a
// terminal's process group may be sent.
func CheckSignal(name string) error {
	if !signalNames[strings.TrimPrefix(strings.ToUpper(name), "SIG")] {
		return fmt.Errorf("signal %q: want one of HUP INT QUIT KILL USR1 USR2 PIPE ALRM TERM CONT STOP TSTP WINCH: %w",
			name, errdefs.ErrInvalidArgument)
	}
	return nil
}
