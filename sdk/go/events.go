package zeish

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"
)

// stateEvent is the SSE event name of a state change.
const stateEvent = "state"

// maxEventLine bounds one line of the event stream; an event is one sandbox
// object, far smaller.
const maxEventLine = 1 << 20

// EventStream is an open GET /public/sandboxes/{id}/events: the sandbox as it
// is after each change. Use it like a bufio.Scanner:
//
//	for stream.Next() {
//		fmt.Println(stream.Event().Sandbox.State)
//	}
//	if err := stream.Err(); err != nil { … }
//
// The server keeps the stream open; it ends when ctx ends, Close is called,
// or the server closes it. It does not reconnect.
type EventStream struct {
	ctx    context.Context
	body   io.ReadCloser
	lines  *bufio.Scanner
	event  Event
	err    error
	closed atomic.Bool
}

// Events subscribes to a sandbox's state changes. An unknown sandbox or a bad
// key fails here, not in Next. Close the stream when done with it.
func (c *Client) Events(ctx context.Context, id string) (*EventStream, error) {
	r := c.control(http.MethodGet, sandboxPath(id, "/events"), nil)
	r.accept = "text/event-stream"
	resp, err := c.send(ctx, r)
	if err != nil {
		return nil, err
	}
	// A proxy's 200 page must not be parsed as a silent, empty stream.
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		resp.Body.Close()
		return nil, fmt.Errorf("zeish: GET %s answered %q, not text/event-stream", r.url, resp.Header.Get("Content-Type"))
	}
	return newEventStream(ctx, resp.Body), nil
}

func newEventStream(ctx context.Context, body io.ReadCloser) *EventStream {
	lines := bufio.NewScanner(body)
	lines.Buffer(make([]byte, 0, 4096), maxEventLine)
	lines.Split(scanSSELines)
	return &EventStream{ctx: ctx, body: body, lines: lines}
}

// Next waits for the next state change and reports whether there is one.
// Events of types this SDK does not know are skipped.
func (s *EventStream) Next() bool {
	if s.err != nil || s.closed.Load() {
		return false
	}
	for {
		name, data, err := s.nextRaw()
		switch {
		case s.closed.Load():
			return false // Close was called: not an error
		case errors.Is(err, io.EOF):
			return false // the server ended the stream
		case err != nil:
			if ctxErr := s.ctx.Err(); ctxErr != nil {
				err = ctxErr
			}
			s.err = fmt.Errorf("zeish: event stream: %w", err)
			return false
		}
		if name != "" && name != stateEvent {
			continue
		}
		var ev Event
		if err := json.Unmarshal(data, &ev); err != nil {
			s.err = fmt.Errorf("zeish: event stream: decoding %q event: %w", name, err)
			return false
		}
		if ev.Type == "" {
			ev.Type = name
		}
		if ev.Type != stateEvent {
			continue
		}
		s.event = ev
		return true
	}
}

// Event is the change Next found.
func (s *EventStream) Event() Event { return s.event }

// Err is why the stream ended: nil when the server closed it or Close was
// called, the context's error when it ended, else what broke.
func (s *EventStream) Err() error { return s.err }

// Close ends the stream; it may be called while Next waits, from another
// goroutine.
func (s *EventStream) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.body.Close()
}

// nextRaw reads up to the next dispatched event, as the WHATWG EventSource
// parser does: "field: value" lines, data lines joined with "\n", comment
// lines (":", the server's keep-alives) ignored, a blank line ending the
// event. id and retry only matter for reconnecting, which this client does not
// do. It returns io.EOF at the end of the stream; an event cut off by it is
// dropped.
func (s *EventStream) nextRaw() (name string, data []byte, err error) {
	var buf bytes.Buffer
	hasData := false
	for s.lines.Scan() {
		line := s.lines.Text()
		if line == "" {
			if !hasData {
				name = "" // an event without data is not dispatched
				continue
			}
			return name, buf.Bytes(), nil
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := strings.Cut(line, ":")
		if found {
			value = strings.TrimPrefix(value, " ")
		}
		switch field {
		case "event":
			name = value
		case "data":
			if hasData {
				buf.WriteByte('\n')
			}
			buf.WriteString(value)
			hasData = true
		}
	}
	if err := s.lines.Err(); err != nil {
		return "", nil, err
	}
	return "", nil, io.EOF
}

// scanSSELines splits at "\r\n", "\n" or a lone "\r", the three line ends the
// event-stream format allows.
func scanSSELines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		switch {
		case i+1 < len(data) && data[i+1] == '\n':
			return i + 2, data[:i], nil
		case i+1 < len(data) || atEOF:
			return i + 1, data[:i], nil
		}
		return 0, nil, nil // a "\r" last in the buffer may be half of "\r\n"
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}
