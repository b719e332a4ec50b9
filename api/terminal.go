package api

import "github.com/zeish/zeish/guest"

// Terminals: an exec with a TTY, over a WebSocket at
// GET {access.url}/terminals/connect (new) or /terminals/{pid}/connect
// (attach). Binary messages carry the terminal's bytes both ways (output to
// the client, keyboard input to the guest); text messages carry JSON
// TermEvent (server → client) and TermControl (client → server).
const (
	TermEventStarted = "started" // first message: the terminal's pid
	TermEventExit    = "exit"    // the process ended: result; the server then closes
	TermEventRefused = "refused" // a control message was refused; the terminal goes on
	TermEventError   = "error"   // the terminal is lost to this client (taken over, channel broken); the server then closes

	TermControlResize = "resize"
	TermControlSignal = "signal"
)

// TermEvent is a server → client text message of a terminal WebSocket.
type TermEvent struct {
	Type   string            `json:"type"`
	PID    int               `json:"pid,omitempty"`
	Result *guest.ExecResult `json:"result,omitempty"`
	Error  *ErrorDetail      `json:"error,omitempty"`
}

// TermControl is a client → server text message of a terminal WebSocket.
type TermControl struct {
	Type   string `json:"type"`
	Rows   int    `json:"rows,omitempty"`
	Cols   int    `json:"cols,omitempty"`
	Signal string `json:"signal,omitempty"`
}

// TerminalList is GET {access.url}/terminals.
type TerminalList struct {
	Terminals []guest.TermInfo `json:"terminals"`
}
