package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// lifecycle serves pause, resume, stop and start: each checks the sandbox is
// the caller's, has the control plane carry out op (slots and budget for
// the ops that run it) and answers like every asynchronous call.
func (s *Server) lifecycle(op sandbox.Op) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		wait, err := decodeAsync(r, &struct{}{})
		if err != nil {
			writeError(w, r, err)
			return
		}
		rec, err := s.ownSandbox(r)
		if err != nil {
			writeError(w, r, err)
			return
		}
		rec, err = s.control.Lifecycle(r.Context(), op, rec)
		if err != nil {
			writeError(w, r, err)
			return
		}
		s.answer(w, r, rec, wait)
	}
}

func (s *Server) lineage(w http.ResponseWriter, r *http.Request) {
	rec, err := s.ownSandbox(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	all, err := s.store.ListSandboxes(r.Context(), store.SandboxFilter{AccountID: rec.AccountID, IncludeDestroyed: true})
	if err != nil {
		writeError(w, r, err)
		return
	}
	byID := map[string]*store.SandboxRecord{}
	children := map[string][]*store.SandboxRecord{}
	for _, x := range all {
		byID[x.ID] = x
		if x.ParentID != "" {
			children[x.ParentID] = append(children[x.ParentID], x)
		}
	}
	entry := func(x *store.SandboxRecord) api.LineageEntry {
		return api.LineageEntry{ID: x.ID, Name: x.Name, State: x.State, ParentID: x.ParentID, CreatedAt: x.CreatedAt}
	}
	out := api.Lineage{Sandbox: entry(rec), Ancestors: []api.LineageEntry{}, Descendants: []api.LineageEntry{}}
	for p := byID[rec.ParentID]; p != nil; p = byID[p.ParentID] {
		out.Ancestors = append(out.Ancestors, entry(p))
	}
	// Breadth first: children before grandchildren.
	queue := children[rec.ID]
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		out.Descendants = append(out.Descendants, entry(x))
		queue = append(queue, children[x.ID]...)
	}
	writeJSON(w, http.StatusOK, out)
}

// events streams the sandbox as it is after every change (server-sent events).
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	rec, err := s.ownSandbox(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(sb sandbox.Sandbox) bool {
		b, _ := jsonLine(api.Event{Type: "state", Sandbox: sb})
		_, err := fmt.Fprintf(w, "event: state\ndata: %s\n\n", b)
		return err == nil && rc.Flush() == nil
	}
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	last := ""
	for {
		changed := s.node.Changed(rec.ID)
		cur, err := s.store.GetSandbox(r.Context(), rec.ID)
		if err != nil {
			return
		}
		if key := string(cur.State) + cur.UpdatedAt.String(); key != last {
			last = key
			if !send(s.view(cur)) {
				return
			}
		}
		if !cur.State.Live() {
			return
		}
		select {
		case <-changed:
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

func jsonLine(v any) (string, error) {
	var b strings.Builder
	err := jsonEncoder(&b).Encode(v)
	return strings.TrimSpace(b.String()), err
}
