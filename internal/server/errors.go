package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
)

// statusOf is the one place an error class becomes an HTTP status.
func statusOf(c errdefs.Class) int {
	switch c {
	case errdefs.ClassInvalid:
		return http.StatusBadRequest
	case errdefs.ClassUnauthenticated:
		return http.StatusUnauthorized
	case errdefs.ClassPermissionDenied:
		return http.StatusForbidden
	case errdefs.ClassNotFound:
		return http.StatusNotFound
	case errdefs.ClassConflict:
		return http.StatusConflict
	case errdefs.ClassRateLimited:
		return http.StatusTooManyRequests
	case errdefs.ClassUnavailable:
		return http.StatusServiceUnavailable
	case errdefs.ClassGone:
		return http.StatusGone
	}
	return http.StatusInternalServerError
}

// writeError answers with the error envelope. Errors that carry no zeish
// class are internal: they are logged in full and shown as "internal".
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := errdefs.Of(err)
	status := statusOf(e.Class)
	msg := err.Error()
	// The sentinel's code closes every wrapped message; drop it from the text.
	msg = strings.TrimSuffix(strings.TrimSuffix(msg, e.Code), ": ")
	if e == errdefs.ErrInternal {
		slog.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if secs, ok := retryAfterSeconds(err); ok {
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	writeJSON(w, status, api.ErrorBody{Error: api.ErrorDetail{Code: e.Code, Message: msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func jsonEncoder(w io.Writer) *json.Encoder { return json.NewEncoder(w) }

const maxBody = 1 << 20

// decode reads a JSON body strictly: unknown fields, trailing data and
// oversize bodies are invalid_argument. An empty body leaves v as it is.
func decode(r *http.Request, v any) error {
	body := http.MaxBytesReader(nil, r.Body, maxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return fmt.Errorf("request body: %s: %w", strings.TrimPrefix(err.Error(), "json: "), errdefs.ErrInvalidArgument)
	}
	if dec.More() {
		return fmt.Errorf("request body: data after the JSON object: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}
