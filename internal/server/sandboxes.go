package server

import (
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/sandbox"
)

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSandboxRequest
	wait, err := decodeAsync(r, &req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	sb, err := s.ctl.Create(r.Context(), callerFrom(r.Context()), req)
	s.answer(w, r, sb, wait, err)
}

// answer ends every asynchronous call that made or changed sb: at once
// (202), or once it settled when the client asked to wait (200).
func (s *Server) answer(w http.ResponseWriter, r *http.Request, sb sandbox.Sandbox, wait bool, err error) {
	status := http.StatusAccepted
	if err == nil && wait {
		sb, err = s.ctl.Settled(r.Context(), sb)
		status = http.StatusOK
	}
	reply(w, r, status, sb, err)
}

// reply answers v with status, or err.
func reply(w http.ResponseWriter, r *http.Request, status int, v any, err error) {
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, status, v)
}

// decodeAsync reads the body of an asynchronous call into v and its ?wait.
func decodeAsync(r *http.Request, v any) (wait bool, err error) {
	if err := decode(r, v); err != nil {
		return false, err
	}
	return boolParam(r, "wait")
}

// boolParam reads a true/false query parameter (absent: false).
func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, invalid("%s=%q: want true or false", name, v)
	}
	return b, nil
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var f control.ListFilter
	if v := q.Get("state"); v != "" {
		for _, st := range strings.Split(v, ",") {
			f.States = append(f.States, sandbox.State(st))
		}
	}
	var err error
	if f.IncludeDestroyed, err = boolParam(r, "include_destroyed"); err != nil {
		writeError(w, r, err)
		return
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, r, invalid("limit=%q: want 1..%d", v, api.MaxListLimit))
			return
		}
		f.Limit = n
	}
	f.After = q.Get("after")
	list, err := s.ctl.List(r.Context(), callerFrom(r.Context()), f)
	reply(w, r, http.StatusOK, list, err)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.ctl.Sandbox(r.Context(), callerFrom(r.Context()), r.PathValue("id"))
	reply(w, r, http.StatusOK, sb, err)
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	wait, err := boolParam(r, "wait")
	if err != nil {
		writeError(w, r, err)
		return
	}
	sb, err := s.ctl.Delete(r.Context(), callerFrom(r.Context()), r.PathValue("id"))
	s.answer(w, r, sb, wait, err)
}

func (s *Server) waitSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.WaitRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	sb, err := s.ctl.Wait(r.Context(), callerFrom(r.Context()), r.PathValue("id"), req)
	reply(w, r, http.StatusOK, sb, err)
}

// lifecycle serves pause, resume, stop and start, answered like every
// asynchronous call.
func (s *Server) lifecycle(op sandbox.Op) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		wait, err := decodeAsync(r, &struct{}{})
		if err != nil {
			writeError(w, r, err)
			return
		}
		sb, err := s.ctl.Lifecycle(r.Context(), callerFrom(r.Context()), op, r.PathValue("id"))
		s.answer(w, r, sb, wait, err)
	}
}

// setTimeout moves a sandbox's deadline: timeout_seconds from now, or none.
func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	var req api.TimeoutRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	sb, err := s.ctl.SetTimeout(r.Context(), callerFrom(r.Context()), r.PathValue("id"), req)
	reply(w, r, http.StatusOK, sb, err)
}

// setNetwork is PATCH /public/sandboxes/{id}/network: a live change of the
// egress policy.
func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) {
	var req api.NetworkPolicyRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	sb, err := s.ctl.SetNetwork(r.Context(), callerFrom(r.Context()), r.PathValue("id"), req)
	reply(w, r, http.StatusOK, sb, err)
}

func (s *Server) lineage(w http.ResponseWriter, r *http.Request) {
	l, err := s.ctl.Lineage(r.Context(), callerFrom(r.Context()), r.PathValue("id"))
	reply(w, r, http.StatusOK, l, err)
}

func (s *Server) access(w http.ResponseWriter, r *http.Request) {
	var req api.AccessRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	a, err := s.ctl.Access(r.Context(), callerFrom(r.Context()), r.PathValue("id"), req, s.publicURL(r)+api.DataPath)
	reply(w, r, http.StatusOK, a, err)
}

// publicURL is the base of the data-plane URLs handed out with a token:
// ZEISH_PUBLIC_URL, else the address the client connected to. The Host
// header is the client's (or a proxy's) to write, so it names the URL only
// where it cannot send the token elsewhere: a console request (sameSite
// matched its browser's Origin to it) or a loopback name on this port.
func (s *Server) publicURL(r *http.Request) string {
	if s.opts.PublicURL != "" {
		return strings.TrimSuffix(s.opts.PublicURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + urlHost(r)
}

type consoleKey struct{}

// urlHost is the host[:port] publicURL names (see there).
func urlHost(r *http.Request) string {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return r.Host // served without a listener (no address to prefer)
	}
	if console, _ := r.Context().Value(consoleKey{}).(bool); console {
		return r.Host
	}
	_, localPort, err := net.SplitHostPort(local.String())
	if err != nil {
		return local.String()
	}
	host, port, err := net.SplitHostPort(r.Host)
	if err == nil && port == localPort {
		if ip := net.ParseIP(host); strings.EqualFold(host, "localhost") || (ip != nil && ip.IsLoopback()) {
			return r.Host
		}
	}
	return local.String()
}
