package server

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net/http"
)

// listWriter writes {"<field>":[…]} to a response one entry at a time, as
// the guest's reply is decoded (guest.ListEach, ProcessesEach): the host
// never holds the list. The status and headers go out with the first
// entry, so an error before it is an ordinary error reply.
type listWriter struct {
	w       http.ResponseWriter
	field   string
	buf     *bufio.Writer
	started bool
}

func (l *listWriter) begin() error {
	if l.started {
		_, err := l.buf.WriteString(",")
		return err
	}
	l.started = true
	l.w.Header().Set("Content-Type", "application/json")
	l.w.WriteHeader(http.StatusOK)
	l.buf = bufio.NewWriterSize(l.w, 32<<10)
	key, _ := json.Marshal(l.field)
	_, err := l.buf.WriteString("{" + string(key) + ":[")
	return err
}

// add writes one entry.
func (l *listWriter) add(v any) error {
	if err := l.begin(); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = l.buf.Write(b)
	return err
}

// streamList answers r with the entries each produces. An error after the
// first entry went out cannot change the status any more: the response is
// cut (the client sees a broken body, never a short list that looks whole).
func streamList[T any](w http.ResponseWriter, r *http.Request, field string, each func(fn func(T) error) error) {
	l := &listWriter{w: w, field: field}
	err := each(func(v T) error { return l.add(v) })
	if err != nil && !l.started {
		writeError(w, r, err)
		return
	}
	if err != nil {
		slog.Default().Warn("list reply cut", "path", r.URL.Path, "err", err)
		panic(http.ErrAbortHandler)
	}
	if !l.started {
		l.begin() // an empty list
	}
	l.buf.WriteString("]}\n")
	l.buf.Flush()
}
