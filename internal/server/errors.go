package server

import (
	"context"
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
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/sandbox"
)

// statusOf is the REST status of an error class (errdefs's table).
func statusOf(c errdefs.Class) int { return errdefs.WireOf(c).HTTP }

// requestIDHeader carries the request id on every response; 5xx bodies
// repeat it, and the log line with the error's detail has it too.
const requestIDHeader = "X-Request-Id"

type requestIDKey struct{}

// withRequestID gives every request an id, on its context and its response.
func withRequestID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := sandbox.NewID(prefixRequest)
		w.Header().Set(requestIDHeader, id)
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
	})
}

const prefixRequest = "req_"

// requestID is the request's id; a request that bypassed withRequestID (a
// handler called directly) gets one here.
func requestID(w http.ResponseWriter, r *http.Request) string {
	if id, ok := r.Context().Value(requestIDKey{}).(string); ok {
		return id
	}
	id := w.Header().Get(requestIDHeader)
	if id == "" {
		id = sandbox.NewID(prefixRequest)
		w.Header().Set(requestIDHeader, id)
	}
	return id
}

// errorDetail is what a client sees of an error: its HTTP status and its
// body (errdefs.Public: a client error shows its message, a server error a
// fixed sentence), with the request id; a server error is logged with its
// detail under that id.
func errorDetail(w http.ResponseWriter, r *http.Request, err error) (int, api.ErrorDetail) {
	status := errdefs.HTTPStatus(err)
	id := requestID(w, r)
	code, msg := errdefs.Public(err)
	if errdefs.ServerFault(err) {
		slog.Error("request failed", "request_id", id, "method", r.Method, "path", r.URL.Path,
			"status", status, "code", code, "err", err)
	}
	return status, api.ErrorDetail{Code: code, Message: msg, RequestID: id}
}

// writeError answers with the error envelope (see errorDetail).
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, detail := errorDetail(w, r, err)
	if secs, ok := control.RetryAfterSeconds(err); ok {
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	if control.Busy(err) {
		// A client the data plane's budget refused keeps no connection.
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, api.ErrorBody{Error: detail})
}

// storeErr classifies an error of the store for a client: one the store
// gave a class (not_found, name_taken, …) keeps it; any other is the store
// failing (an outage, a lost connection), which a client may retry:
// unavailable, never a 401 or 404 made of it.
func storeErr(err error) error {
	var e *errdefs.Error
	if err == nil || errors.As(err, &e) {
		return err
	}
	return fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err)
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
