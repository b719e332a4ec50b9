package zeish

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
)

// APIError is an error response from zeishd. It unwraps to the errdefs
// sentinel of its Code, so errors.Is(err, errdefs.ErrNotFound) works.
type APIError struct {
	Status  int    // HTTP status; 200 for an error reported inside an exec stream
	Code    string // stable code, one of errdefs.All()
	Message string // what went wrong, for humans
	// RequestID is the failed request's id (its X-Request-Id): zeishd's log
	// has the detail of a server error under it.
	RequestID string
}

func (e *APIError) Error() string {
	if e.Status >= 500 && e.RequestID != "" {
		return fmt.Sprintf("zeish: %s: %s (request %s)", e.Code, e.Message, e.RequestID)
	}
	return fmt.Sprintf("zeish: %s: %s", e.Code, e.Message)
}

// Unwrap returns the errdefs sentinel for e.Code, or nil for a code this
// version of the SDK does not know.
func (e *APIError) Unwrap() error {
	// A nil *errdefs.Error must not become a non-nil error interface.
	if s := errdefs.ByCode(e.Code); s != nil {
		return s
	}
	return nil
}

// SandboxError is a sandbox that ended in state error where it was meant to
// run: a create, start, resume, clone or restore called with Wait(), or
// WaitForState. Code is its stable error_code (sandbox.ErrBootFailed, …) and
// Message its error_message (for a failed boot, the guest console's last
// lines). It unwraps to errdefs.ErrInvalidState.
type SandboxError struct {
	Sandbox Sandbox
	Wanted  State // the state waited for; "" for a call with Wait()
}

func (e *SandboxError) Error() string {
	sb := e.Sandbox
	msg := fmt.Sprintf("zeish: sandbox %s (%s) is in error", sb.Name, sb.ID)
	if e.Wanted != "" {
		msg += " and will not become " + string(e.Wanted)
	}
	code, text := sb.ErrorCode, sb.ErrorMessage
	if code == "" {
		code = "error"
	}
	if text == "" {
		text = sb.StateReason
	}
	return msg + ": " + code + ": " + text
}

// Unwrap makes errors.Is(err, errdefs.ErrInvalidState) hold.
func (e *SandboxError) Unwrap() error { return errdefs.ErrInvalidState }

// settledErr turns a sandbox that a Wait() call found in state error into a
// *SandboxError, so a failed create, start or restore is never mistaken for
// a success.
func settledErr(sb Sandbox, err error, opts []CallOption) error {
	if err != nil || sb.State != sandbox.StateError {
		return err
	}
	var o callOptions
	for _, opt := range opts {
		opt(&o)
	}
	if !o.wait {
		return nil
	}
	return &SandboxError{Sandbox: sb}
}

// maxErrorBody bounds how much of an error response is read: a misbehaving
// proxy must not make the client swallow an unbounded page.
const maxErrorBody = 64 << 10

// decodeError turns a non-2xx response into an *APIError. Responses that are
// not zeish's JSON envelope (a proxy's 502 page, say) still get a code,
// derived from the status, so errors.Is keeps working.
func decodeError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body api.ErrorBody
	if json.Unmarshal(raw, &body) == nil && body.Error.Code != "" {
		return &APIError{Status: resp.StatusCode, Code: body.Error.Code, Message: body.Error.Message, RequestID: body.Error.RequestID}
	}
	msg := strings.TrimSpace(string(raw))
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &APIError{Status: resp.StatusCode, Code: codeForStatus(resp.StatusCode), Message: msg, RequestID: resp.Header.Get("X-Request-Id")}
}

// codeForStatus reads errdefs's table backwards, for an answer without a
// code (a proxy's, say).
func codeForStatus(status int) string { return errdefs.FromHTTPStatus(status).Code }
