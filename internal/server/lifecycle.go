package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
)

// events streams the sandbox as it is after every change (server-sent
// events), until it is destroyed or the client goes.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	who := callerFrom(r.Context())
	sb, err := s.ctl.Sandbox(r.Context(), who, r.PathValue("id"))
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
		changed := s.ctl.Changed(sb.ID)
		cur, err := s.ctl.Sandbox(r.Context(), who, sb.ID)
		if err != nil {
			return
		}
		if key := string(cur.State) + cur.UpdatedAt.String(); key != last {
			last = key
			if !send(cur) {
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
