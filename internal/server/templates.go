package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"time"

	"github.com/zeish/zeish/api"
)

// maxUploadBytes bounds an uploaded image archive.
const maxUploadBytes = 32 << 30

func (s *Server) createTemplate(w http.ResponseWriter, r *http.Request) {
	var (
		req    api.BuildTemplateRequest
		upload io.Reader
	)
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		// Parts in order: spec first, then the archive, streamed as it
		// arrives (never parsed into memory or a temp file by net/http).
		mr := multipart.NewReader(http.MaxBytesReader(w, r.Body, maxUploadBytes), params["boundary"])
		part, err := mr.NextPart()
		if err != nil || part.FormName() != "spec" {
			writeError(w, r, invalid("multipart body: the first part must be \"spec\" (the JSON request)"))
			return
		}
		dec := json.NewDecoder(io.LimitReader(part, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, r, invalid("spec part: %s", strings.TrimPrefix(err.Error(), "json: ")))
			return
		}
		if part, err = mr.NextPart(); err != nil || part.FormName() != "image" {
			writeError(w, r, invalid("multipart body: the second part must be \"image\" (the archive)"))
			return
		}
		upload = part
	} else if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.ctl.BuildTemplate(r.Context(), callerFrom(r.Context()), req, upload)
	if err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			err = invalid("upload larger than %d GiB", maxUploadBytes>>30)
		}
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, t)
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	list, err := s.ctl.Templates(r.Context(), callerFrom(r.Context()))
	reply(w, r, http.StatusOK, list, err)
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := s.ctl.Template(r.Context(), callerFrom(r.Context()), r.PathValue("id"))
	reply(w, r, http.StatusOK, t, err)
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := s.ctl.DeleteTemplate(r.Context(), callerFrom(r.Context()), r.PathValue("id"))
	reply(w, r, http.StatusOK, t, err)
}

// templateEvents replays the build log as server-sent events and follows
// it until the build ends (a state event with a settled template).
func (s *Server) templateEvents(w http.ResponseWriter, r *http.Request) {
	t, err := s.ctl.Template(r.Context(), callerFrom(r.Context()), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if t.Builtin || t.ID == "" {
		b, _ := jsonLine(api.TemplateEvent{Type: "state", Time: time.Now().UTC().Format(time.RFC3339Nano), Template: &t})
		fmt.Fprintf(w, "event: state\ndata: %s\n\n", b)
		rc.Flush()
		return
	}
	// The log is followed in its own goroutine, so the wait for its next
	// event and the keep-alive share this one writer.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	events := make(chan api.TemplateEvent)
	followed := make(chan error, 1)
	go func() {
		followed <- s.ctl.FollowTemplate(ctx, t, 0, func(e api.TemplateEvent) error {
			select {
			case events <- e:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case e := <-events:
			b, _ := jsonLine(e)
			if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.Type, b); err != nil || rc.Flush() != nil {
				return
			}
		case err := <-followed:
			if err != nil && ctx.Err() == nil {
				s.log.Warn("template events", "template", t.ID, "err", err)
			}
			return
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}
