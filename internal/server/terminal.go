package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/zeish/zeish/internal/control"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/coder/websocket"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
)

// Terminals over WebSockets: the request is checked and the guest terminal
// started (or attached) before the upgrade, so every refusal is a plain HTTP
// error with a stable code; after it, the protocol of api/terminal.go.

const (
	maxTermArgs     = 256
	maxTermInputMsg = 64 << 10
)

var userName = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// queryToken lets a browser, which cannot set headers on a WebSocket,
// present its data-plane token as ?access_token=.
func queryToken(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if tok := r.URL.Query().Get("access_token"); tok != "" && r.Header.Get("Authorization") == "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		h(w, r)
	}
}

// termSize reads ?rows=&cols=; both absent is allowed only when optional.
func termSize(q map[string][]string, optional bool) (*guest.TermSize, error) {
	rows, cols := first(q["rows"]), first(q["cols"])
	if optional && rows == "" && cols == "" {
		return nil, nil
	}
	r, err1 := strconv.Atoi(rows)
	c, err2 := strconv.Atoi(cols)
	if err1 != nil || err2 != nil {
		return nil, invalid("rows=%q cols=%q: want the window size in character cells", rows, cols)
	}
	size := guest.TermSize{Rows: r, Cols: c}
	if err := size.Check(); err != nil {
		return nil, err
	}
	return &size, nil
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func termRequest(r *http.Request) (guest.TermRequest, error) {
	q := r.URL.Query()
	size, err := termSize(q, false)
	if err != nil {
		return guest.TermRequest{}, err
	}
	req := guest.TermRequest{Argv: q["argv"], Cwd: q.Get("cwd"), User: q.Get("user"), Size: *size}
	switch {
	case len(req.Argv) > maxTermArgs:
		return req, invalid("argv: at most %d arguments", maxTermArgs)
	case len(req.Argv) > 0 && req.Argv[0] == "":
		return req, invalid("argv must name a command")
	case req.Cwd != "" && !path.IsAbs(req.Cwd):
		return req, invalid("cwd %q must be an absolute path", req.Cwd)
	case req.User != "" && !userName.MatchString(req.User):
		return req, invalid("user %q is not a user name", req.User)
	}
	if env := q["env"]; len(env) > 0 {
		req.Env = map[string]string{}
		for _, kv := range env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return req, invalid("env=%q: want KEY=VALUE", kv)
			}
			req.Env[k] = v
		}
		if err := control.CheckEnv(req.Env); err != nil {
			return req, err
		}
	}
	return req, nil
}

func (s *Server) listTerminals(w http.ResponseWriter, r *http.Request) {
	list, err := agentFrom(r.Context()).Terminals(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	if list == nil {
		list = []guest.TermInfo{}
	}
	writeJSON(w, http.StatusOK, api.TerminalList{Terminals: list})
}

func (s *Server) newTerminal(w http.ResponseWriter, r *http.Request) {
	req, err := termRequest(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if !websocketRequest(r) {
		writeError(w, r, invalid("this endpoint speaks WebSocket: send Upgrade: websocket"))
		return
	}
	s.serveTerminal(w, r, func(ctx context.Context, out io.Writer) (*guest.Terminal, error) {
		return agentFrom(r.Context()).Terminal(ctx, req, out)
	})
}

func (s *Server) attachTerminal(w http.ResponseWriter, r *http.Request) {
	pid, err := strconv.Atoi(r.PathValue("pid"))
	if err != nil || pid <= 1 {
		writeError(w, r, invalid("pid %q: want a process id above 1", r.PathValue("pid")))
		return
	}
	size, err := termSize(r.URL.Query(), true)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if !websocketRequest(r) {
		writeError(w, r, invalid("this endpoint speaks WebSocket: send Upgrade: websocket"))
		return
	}
	s.serveTerminal(w, r, func(ctx context.Context, out io.Writer) (*guest.Terminal, error) {
		return agentFrom(r.Context()).AttachTerminal(ctx, pid, size, out)
	})
}

// sameOrigin refuses a WebSocket opened by a page of another site: such a
// page must not drive a terminal even if it got hold of a token. Clients
// that are not browsers send no Origin.
func sameOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || !strings.EqualFold(u.Host, r.Host) {
		return fmt.Errorf("cross-site WebSocket from origin %q refused: %w", origin, errdefs.ErrForbidden)
	}
	return nil
}

func websocketRequest(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// serveTerminal opens the guest terminal, upgrades, and relays until the
// process ends (exit event) or either side goes (the guest terminal is then
// only detached).
func (s *Server) serveTerminal(w http.ResponseWriter, r *http.Request, open func(context.Context, io.Writer) (*guest.Terminal, error)) {
	// The hijacked connection outlives nothing but this handler.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	outR, outW := io.Pipe()
	defer outR.Close()
	if err := sameOrigin(r); err != nil {
		writeError(w, r, err)
		return
	}
	term, err := open(ctx, outW)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer term.Close()
	// sameOrigin has checked the Origin already, with a JSON refusal.
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		s.log.Debug("terminal upgrade refused", "err", err)
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(maxTermInputMsg)
	log := s.log.With("sandbox", r.PathValue("id"), "terminal", term.PID())
	log.Debug("terminal connected")

	sendEvent := func(ev api.TermEvent) error {
		b, _ := json.Marshal(ev)
		return c.Write(ctx, websocket.MessageText, b)
	}
	if sendEvent(api.TermEvent{Type: api.TermEventStarted, PID: term.PID()}) != nil {
		return
	}
	// One goroutine writes output, so an exit event never overtakes it.
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 32<<10)
		for {
			n, err := outR.Read(buf)
			if n > 0 {
				if c.Write(ctx, websocket.MessageBinary, buf[:n]) != nil {
					outR.CloseWithError(errors.New("client gone")) // the guest output then only fills the scrollback
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	clientGone := make(chan struct{})
	go func() {
		defer close(clientGone)
		for {
			typ, p, err := c.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				if _, err := term.Write(p); err != nil {
					return
				}
				continue
			}
			if err := controlTerminal(term, p); err != nil {
				_, detail := errorDetail(w, r, err)
				if sendEvent(api.TermEvent{Type: api.TermEventRefused, Error: &detail}) != nil {
					return
				}
			}
		}
	}()
	select {
	case <-term.Done():
	case <-clientGone:
		log.Debug("terminal client gone: detached")
		return
	}
	outW.Close()
	<-copied
	res, err := term.Result()
	if err != nil {
		_, detail := errorDetail(w, r, err)
		sendEvent(api.TermEvent{Type: api.TermEventError, Error: &detail})
		c.Close(websocket.StatusTryAgainLater, detail.Code)
		return
	}
	sendEvent(api.TermEvent{Type: api.TermEventExit, Result: &res})
	c.Close(websocket.StatusNormalClosure, "exited")
}

// controlTerminal applies one control message.
func controlTerminal(term *guest.Terminal, p []byte) error {
	m, err := decodeTermControl(p)
	if err != nil {
		return err
	}
	if m.Type == api.TermControlResize {
		return term.Resize(guest.TermSize{Rows: m.Rows, Cols: m.Cols})
	}
	return term.Signal(m.Signal)
}

// decodeTermControl reads one control message of a terminal's client:
// resize or signal, anything else is invalid_argument.
func decodeTermControl(p []byte) (api.TermControl, error) {
	var m api.TermControl
	if err := json.Unmarshal(p, &m); err != nil {
		return m, invalid("control message: %v", err)
	}
	if m.Type != api.TermControlResize && m.Type != api.TermControlSignal {
		return m, invalid("control message type %q: want resize or signal", m.Type)
	}
	return m, nil
}
