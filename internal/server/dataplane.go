package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/control"
)

type callKey struct{}

// agentFrom is the agent of the data-plane call's sandbox (withToken).
func agentFrom(ctx context.Context) *guest.Client {
	c, _ := ctx.Value(callKey{}).(control.Call)
	return c.Agent
}

// targetFrom is the data-plane call's sandbox (withToken).
func targetFrom(ctx context.Context) control.Target {
	c, _ := ctx.Value(callKey{}).(control.Call)
	return c.Target
}

// withToken opens a data-plane call on the sandbox in the path with the
// request's token and hands the handler the sandbox and its agent.
func (s *Server) withToken(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		call, err := s.ctl.Open(r.Context(), token(r), r.PathValue("id"))
		if err != nil {
			writeError(w, r, err)
			return
		}
		defer call.Release()
		h(w, r.WithContext(context.WithValue(r.Context(), callKey{}, call)))
	}
}

const maxExecTimeout = 24 * time.Hour

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req api.ExecRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	switch {
	case len(req.Argv) == 0 || req.Argv[0] == "":
		writeError(w, r, invalid("argv must name a command"))
		return
	case req.TimeoutSeconds < 0 || req.TimeoutSeconds > maxExecTimeout.Seconds():
		writeError(w, r, invalid("timeout_seconds must be within 0..%d", int(maxExecTimeout.Seconds())))
		return
	case req.Cwd != "" && !path.IsAbs(req.Cwd):
		writeError(w, r, invalid("cwd %q must be an absolute path", req.Cwd))
		return
	}
	if err := control.CheckEnv(req.Env); err != nil {
		writeError(w, r, err)
		return
	}
	ew := &eventWriter{w: w}
	var stdin io.Reader
	if len(req.Stdin) > 0 {
		stdin = strings.NewReader(string(req.Stdin))
	}
	res, err := agentFrom(r.Context()).Exec(r.Context(), guest.ExecRequest{
		Argv: req.Argv, Env: req.Env, Cwd: req.Cwd, User: req.User,
		Timeout: time.Duration(req.TimeoutSeconds * float64(time.Second)),
	}, stdin, ew.stream(api.EventStdout), ew.stream(api.EventStderr))
	if err != nil {
		if !ew.started() {
			writeError(w, r, err)
			return
		}
		_, detail := errorDetail(w, r, err)
		ew.send(api.ExecEvent{Type: api.EventError, Error: &detail})
		return
	}
	ew.send(api.ExecEvent{Type: api.EventExit, Result: &res})
}

// eventWriter streams exec events as NDJSON, one flushed line per event. The
// status line goes out with the first event, so an exec that fails before any
// output still gets a proper error response.
type eventWriter struct {
	mu    sync.Mutex
	w     http.ResponseWriter
	enc   *json.Encoder
	begun bool
}

func (e *eventWriter) started() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.begun
}

func (e *eventWriter) send(ev api.ExecEvent) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.begun {
		e.begun = true
		e.w.Header().Set("Content-Type", "application/x-ndjson")
		e.w.WriteHeader(http.StatusOK)
		e.enc = json.NewEncoder(e.w)
	}
	if err := e.enc.Encode(ev); err != nil {
		return err
	}
	http.NewResponseController(e.w).Flush()
	return nil
}

type streamFunc func(p []byte) (int, error)

func (f streamFunc) Write(p []byte) (int, error) { return f(p) }

func (e *eventWriter) stream(typ string) io.Writer {
	return streamFunc(func(p []byte) (int, error) {
		data := append([]byte(nil), p...)
		if err := e.send(api.ExecEvent{Type: typ, Data: data}); err != nil {
			return 0, err
		}
		return len(p), nil
	})
}

// pathParam reads the absolute guest path from ?path=.
func pathParam(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" || !path.IsAbs(p) {
		return "", invalid("path=%q: want an absolute path in the sandbox", p)
	}
	return path.Clean(p), nil
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	rc, info, err := agentFrom(r.Context()).ReadFile(r.Context(), p)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	w.WriteHeader(http.StatusOK)
	io.Copy(w, rc)
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	perm := os.FileMode(0o644)
	if v := r.URL.Query().Get("mode"); v != "" {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil || m > 0o7777 {
			writeError(w, r, invalid("mode=%q: want octal permission bits like 0644", v))
			return
		}
		perm = os.FileMode(m)
	}
	info, err := agentFrom(r.Context()).WriteFileAs(r.Context(), p, perm, r.URL.Query().Get("user"), r.Body)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	recursive, _ := strconv.ParseBool(r.URL.Query().Get("recursive"))
	if p == "/" {
		writeError(w, r, invalid("refusing to remove /"))
		return
	}
	if err := agentFrom(r.Context()).Remove(r.Context(), p, recursive); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	// Streamed (api.FileList's shape): a directory of any size costs the
	// host one entry at a time.
	streamList(w, r, "files", func(fn func(guest.FileInfo) error) error {
		return agentFrom(r.Context()).ListEach(r.Context(), p, fn)
	})
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	info, err := agentFrom(r.Context()).Stat(r.Context(), p)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) {
	var req api.MkdirRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if !path.IsAbs(req.Path) {
		writeError(w, r, invalid("path %q: want an absolute path in the sandbox", req.Path))
		return
	}
	info, err := agentFrom(r.Context()).Mkdir(r.Context(), path.Clean(req.Path), req.Parents)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) processes(w http.ResponseWriter, r *http.Request) {
	// Streamed (api.ProcessList's shape), like listFiles.
	streamList(w, r, "processes", func(fn func(guest.Process) error) error {
		return agentFrom(r.Context()).ProcessesEach(r.Context(), fn)
	})
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	pid, err := strconv.Atoi(r.PathValue("pid"))
	if err != nil || pid <= 1 {
		writeError(w, r, invalid("pid %q: want a process id above 1", r.PathValue("pid")))
		return
	}
	var req api.KillRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if req.Signal == "" {
		req.Signal = "KILL"
	}
	if err := agentFrom(r.Context()).Kill(r.Context(), pid, req.Signal); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
