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
	"github.com/zeish/zeish/errdefs"
)

// maxUploadBytes bounds an uploaded image archive.
const maxUploadBytes = 32 << 30

func (s *Server) createTemplate(w http.ResponseWriter, r *http.Request) {
	req, upload, err := decodeBuild(w, r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.ctl.BuildTemplate(r.Context(), callerFrom(r.Context()), req, upload)
	if err != nil {
		writeError(w, r, uploadErr(err))
		return
	}
	writeJSON(w, http.StatusAccepted, t)
}

// decodeBuild reads a build request: JSON, or multipart/form-data with a
// "spec" part (the JSON) first and the "image" part (the archive) second.
// The archive is returned as a reader of the part as it arrives: net/http
// never parses it into memory or a temp file, and the caller stores it.
func decodeBuild(w http.ResponseWriter, r *http.Request) (req api.BuildTemplateRequest, upload io.Reader, err error) {
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		return req, nil, decode(r, &req)
	}
	if params["boundary"] == "" {
		return req, nil, invalid("multipart body: the Content-Type has no boundary")
	}
	mr := multipart.NewReader(http.MaxBytesReader(w, r.Body, maxUploadBytes), params["boundary"])
	part, err := mr.NextPart()
	if err != nil || part.FormName() != "spec" {
		return req, nil, uploadErr(invalid("multipart body: the first part must be \"spec\" (the JSON request)"), err)
	}
	dec := json.NewDecoder(io.LimitReader(part, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, nil, uploadErr(invalid("spec part: %s", strings.TrimPrefix(err.Error(), "json: ")), err)
	}
	if part, err = mr.NextPart(); err != nil || part.FormName() != "image" {
		return req, nil, uploadErr(invalid("multipart body: the second part must be \"image\" (the archive)"), err)
	}
	return req, part, nil
}

// uploadErr is err, unless cause (or err itself) is the body passing its
// 32 GiB cap: that is upload_too_large, whatever the reader made of it.
func uploadErr(err error, cause ...error) error {
	for _, c := range append(cause, err) {
		if errors.As(c, new(*http.MaxBytesError)) {
			return fmt.Errorf("upload larger than %d GiB: %w", maxUploadBytes>>30, errdefs.ErrUploadTooLarge)
		}
	}
	return err
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
