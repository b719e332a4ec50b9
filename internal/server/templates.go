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
	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/template"
)

// Template build limits.
const (
	minTemplateDiskMiB = 64
	maxUploadBytes     = 32 << 30
	maxCmdArgs         = 256
	// maxReadyTimeoutSeconds bounds a warm build's wait for its ready command.
	maxReadyTimeoutSeconds = 3600
)

func (s *Server) createTemplate(w http.ResponseWriter, r *http.Request) {
	acct := accountFrom(r.Context())
	req, upload, err := decodeBuild(w, r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	breq, err := s.buildRequest(r.Context(), acct.ID, acct.Admin, req, upload != nil)
	if err != nil {
		writeError(w, r, err)
		return
	}
	breq.Upload = upload
	build := s.opts.Catalog.Build
	if nt, ok := s.node.(NodeTemplates); ok {
		build = nt.BuildTemplate // on a node, which keeps the files
	}
	t, err := build(r.Context(), breq)
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

// buildRequest validates a build request at the edge.
func (s *Server) buildRequest(ctx context.Context, accountID string, admin bool, req api.BuildTemplateRequest, upload bool) (catalog.BuildRequest, error) {
	if err := sandbox.CheckName(req.Name); err != nil {
		return catalog.BuildRequest{}, err
	}
	var src template.Source
	if upload {
		t := strings.TrimSuffix(strings.TrimSuffix(req.From, ":upload"), ":")
		if t != template.TransportDockerArchive && t != template.TransportOCIArchive {
			return catalog.BuildRequest{}, invalid("from %q: an upload is a docker-archive or an oci-archive", req.From)
		}
		src = template.Source{Transport: t}
	} else {
		var err error
		if src, err = template.ParseSource(req.From); err != nil {
			return catalog.BuildRequest{}, invalid("from: %v", err)
		}
		// A path names a file on the server: only the operator may.
		if src.Transport != template.TransportRegistry && !admin {
			return catalog.BuildRequest{}, invalid("from %q: upload the archive (multipart/form-data), or use registry:", req.From)
		}
		src.Username, src.Password = req.Username, req.Password
	}
	if req.RegistrySecret != "" {
		if src.Transport != template.TransportRegistry {
			return catalog.BuildRequest{}, invalid("registry_secret goes with from registry:HOST/REPO:TAG, not %q", req.From)
		}
		if req.Username != "" || req.Password != "" {
			return catalog.BuildRequest{}, invalid("registry_secret and username/password are exclusive")
		}
	}
	switch {
	case req.DiskMiB == 0:
		req.DiskMiB = template.DiskMiB
	case req.DiskMiB < minTemplateDiskMiB || req.DiskMiB > sandbox.MaxDiskMiB:
		return catalog.BuildRequest{}, invalid("disk_mib %d is outside %d..%d", req.DiskMiB, minTemplateDiskMiB, sandbox.MaxDiskMiB)
	}
	if req.ReadyTimeoutSeconds < 0 || req.ReadyTimeoutSeconds > maxReadyTimeoutSeconds {
		return catalog.BuildRequest{}, invalid("ready_timeout_seconds %d is outside 0..%d", req.ReadyTimeoutSeconds, maxReadyTimeoutSeconds)
	}
	if req.VCPUs != 0 || req.MemoryMiB != 0 {
		if req.Cold {
			return catalog.BuildRequest{}, invalid("vcpus and memory_mib size the warm machine; a cold template has none")
		}
		if _, err := sandbox.ResolveSize("", req.VCPUs, req.MemoryMiB, 0); err != nil {
			return catalog.BuildRequest{}, err
		}
	}
	for _, c := range [][]string{req.StartCmd, req.ReadyCmd} {
		if len(c) > maxCmdArgs {
			return catalog.BuildRequest{}, invalid("start_cmd and ready_cmd take at most %d arguments", maxCmdArgs)
		}
	}
	if req.RegistrySecret != "" {
		// Read last, once the request is otherwise valid; the value lives
		// in this build's memory only (the build keeps the secret's name).
		value, err := s.accountSecret(ctx, accountID, "registry_secret", req.RegistrySecret)
		if err != nil {
			return catalog.BuildRequest{}, err
		}
		src.Username, src.Password, src.Token = template.RegistryCredentials(value)
	}
	return catalog.BuildRequest{AccountID: accountID, Name: req.Name, Source: src, DiskMiB: req.DiskMiB, RegistrySecret: req.RegistrySecret,
		StartCmd: req.StartCmd, ReadyCmd: req.ReadyCmd, ReadyTimeoutSeconds: req.ReadyTimeoutSeconds, Cold: req.Cold,
		VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB}, nil
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := s.opts.Catalog.List(r.Context(), accountFrom(r.Context()).ID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.TemplateList{Templates: ts})
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := s.opts.Catalog.Resolve(r.Context(), accountFrom(r.Context()).ID, r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	acct := accountFrom(r.Context()).ID
	t, err := s.opts.Catalog.Resolve(r.Context(), acct, r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	if nt, ok := s.templatesOn(t); ok {
		t, err = nt.DeleteTemplate(r.Context(), t.Host, acct, r.PathValue("id"))
	} else {
		t, err = s.opts.Catalog.Delete(r.Context(), acct, r.PathValue("id"))
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// templateEvents replays the build log as server-sent events and follows
// it until the build ends (a state event with a settled template).
func (s *Server) templateEvents(w http.ResponseWriter, r *http.Request) {
	t, err := s.opts.Catalog.Resolve(r.Context(), accountFrom(r.Context()).ID, r.PathValue("id"))
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
	events := make(chan catalog.Event)
	followed := make(chan error, 1)
	follow := s.opts.Catalog.Follow
	if nt, ok := s.templatesOn(t); ok {
		follow = func(ctx context.Context, id string, from int, fn func(catalog.Event) error) error {
			return nt.FollowTemplate(ctx, t.Host, id, from, fn)
		}
	}
	go func() {
		followed <- follow(ctx, t.ID, 0, func(e catalog.Event) error {
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
			ev := api.TemplateEvent{Type: e.Type, Time: e.Time.Format(time.RFC3339Nano), Message: e.Message, Template: e.Template}
			if p := e.Progress; p != nil {
				ev.Progress = &api.TemplateProgress{Step: p.Step, Layer: p.Layer, Layers: p.Layers, Bytes: p.Bytes, Total: p.Total, Message: p.Message}
			}
			b, _ := jsonLine(ev)
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
