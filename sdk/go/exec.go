package zeish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/zeish/zeish/api"
)

// Exec runs req.Argv in the sandbox and copies its output to stdout and
// stderr (nil: discard) as the guest produces it. It returns how the process
// ended; a non-zero exit code, a signal or a timeout is a result, not an
// error. An error means the command could not be run or the stream broke.
func (sc *SandboxConn) Exec(ctx context.Context, req ExecRequest, stdout, stderr io.Writer) (ExecResult, error) {
	body, err := sc.send(ctx, request{method: http.MethodPost, json: req}, "/exec")
	if err != nil {
		return ExecResult{}, err
	}
	defer body.Close()
	return readExecStream(body, stdout, stderr)
}

// readExecStream consumes an application/x-ndjson exec response. A JSON
// decoder rather than a line scanner: an output chunk can be longer than any
// fixed line limit.
func readExecStream(r io.Reader, stdout, stderr io.Writer) (ExecResult, error) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	dec := json.NewDecoder(r)
	for {
		var ev api.ExecEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return ExecResult{}, fmt.Errorf("zeish: exec stream ended before the process did: %w", err)
		}
		switch ev.Type {
		case api.EventStdout:
			if _, err := stdout.Write(ev.Data); err != nil {
				return ExecResult{}, fmt.Errorf("zeish: writing exec stdout: %w", err)
			}
		case api.EventStderr:
			if _, err := stderr.Write(ev.Data); err != nil {
				return ExecResult{}, fmt.Errorf("zeish: writing exec stderr: %w", err)
			}
		case api.EventExit:
			if ev.Result == nil {
				return ExecResult{}, fmt.Errorf("zeish: exec exit event without a result")
			}
			return *ev.Result, nil
		case api.EventError:
			if ev.Error == nil {
				return ExecResult{}, fmt.Errorf("zeish: exec error event without an error")
			}
			return ExecResult{}, &APIError{Status: http.StatusOK, Code: ev.Error.Code, Message: ev.Error.Message, RequestID: ev.Error.RequestID}
		default:
			// Unknown event types are skipped so newer servers can add some.
		}
	}
}
