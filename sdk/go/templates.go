package zeish

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
)

// Template types, as the server sends them.
type (
	Template             = sandbox.Template
	TemplateState        = sandbox.TemplateState
	BuildTemplateRequest = api.BuildTemplateRequest
	TemplateEvent        = api.TemplateEvent
	TemplateProgress     = api.TemplateProgress
)

// Template states.
const (
	TemplateBuilding = sandbox.TemplateBuilding
	TemplateReady    = sandbox.TemplateReady
	TemplateError    = sandbox.TemplateError
	TemplateDeleted  = sandbox.TemplateDeleted
)

func templatePath(ref, suffix string) string {
	return "/public/templates/" + url.PathEscape(ref) + suffix
}

// BuildTemplate starts a build from a registry image (req.From =
// "registry:host/repo:tag") or, for the admin account, from an archive or
// layout on the server. It returns at once with the template building.
func (c *Client) BuildTemplate(ctx context.Context, req BuildTemplateRequest) (Template, error) {
	var t Template
	err := c.call(ctx, c.control(http.MethodPost, "/public/templates", req), &t)
	return t, err
}

// UploadTemplate starts a build from an archive streamed from archive:
// req.From is "docker-archive" or "oci-archive". The archive is sent as it
// is read, never held in memory.
func (c *Client) UploadTemplate(ctx context.Context, req BuildTemplateRequest, archive io.Reader) (Template, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := func() error {
			spec, err := mw.CreateFormField("spec")
			if err != nil {
				return err
			}
			if err := json.NewEncoder(spec).Encode(req); err != nil {
				return err
			}
			img, err := mw.CreateFormFile("image", "image.tar")
			if err != nil {
				return err
			}
			if _, err := io.Copy(img, archive); err != nil {
				return err
			}
			return mw.Close()
		}()
		pw.CloseWithError(err)
	}()
	r := c.control(http.MethodPost, "/public/templates", nil)
	r.body, r.contentType = pr, mw.FormDataContentType()
	var t Template
	err := c.call(ctx, r, &t)
	pr.CloseWithError(errors.New("request ended")) // stop the writer if the server answered early
	return t, err
}

// BuildTemplateFrom builds from a source as zeishctl takes it:
// registry:REF is pulled by the server; docker-archive:PATH and
// oci-archive:PATH are uploaded; oci:DIR is uploaded as an OCI archive.
func (c *Client) BuildTemplateFrom(ctx context.Context, req BuildTemplateRequest, from string) (Template, error) {
	transport, ref, ok := strings.Cut(from, ":")
	if !ok || ref == "" {
		return Template{}, fmt.Errorf("zeish: --from %q: want TRANSPORT:REF (registry:, docker-archive:, oci-archive:, oci:)", from)
	}
	switch transport {
	case "registry":
		req.From = from
		return c.BuildTemplate(ctx, req)
	case "docker-archive", "oci-archive":
		f, err := os.Open(ref)
		if err != nil {
			return Template{}, fmt.Errorf("zeish: %w", err)
		}
		defer f.Close()
		req.From = transport
		return c.UploadTemplate(ctx, req, f)
	case "oci":
		if _, err := os.Stat(filepath.Join(ref, "index.json")); err != nil {
			return Template{}, fmt.Errorf("zeish: %s is not an OCI image layout: %w", ref, err)
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tarDir(pw, ref)) }()
		defer pr.Close()
		req.From = "oci-archive"
		return c.UploadTemplate(ctx, req, pr)
	}
	return Template{}, fmt.Errorf("zeish: --from %q: unknown transport %q (registry, docker-archive, oci-archive, oci)", from, transport)
}

// tarDir writes the regular files and folders under dir as a tar stream.
func tarDir(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." || !(fi.IsDir() || fi.Mode().IsRegular()) {
			return err
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// ListTemplates lists the account's templates and the built-ins.
func (c *Client) ListTemplates(ctx context.Context) ([]Template, error) {
	var out api.TemplateList
	err := c.call(ctx, c.control(http.MethodGet, "/public/templates", nil), &out)
	return out.Templates, err
}

// GetTemplate returns a template by id or name.
func (c *Client) GetTemplate(ctx context.Context, ref string) (Template, error) {
	var t Template
	err := c.call(ctx, c.control(http.MethodGet, templatePath(ref, ""), nil), &t)
	return t, err
}

// DeleteTemplate deletes a template; sandboxes using it keep working.
func (c *Client) DeleteTemplate(ctx context.Context, ref string) (Template, error) {
	var t Template
	err := c.call(ctx, c.control(http.MethodDelete, templatePath(ref, ""), nil), &t)
	return t, err
}

// TemplateEvents replays a template's build log and follows it, calling fn
// with each event, until the build has ended (it returns nil), fn fails
// or ctx ends.
func (c *Client) TemplateEvents(ctx context.Context, ref string, fn func(TemplateEvent) error) error {
	r := c.control(http.MethodGet, templatePath(ref, "/events"), nil)
	r.accept = "text/event-stream"
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), maxEventLine)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e TemplateEvent
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return fmt.Errorf("zeish: template event: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("zeish: template events: %w", err)
	}
	return ctx.Err()
}

// WaitTemplate follows a build until it ends and returns the template
// (ready, or error with its state_reason).
func (c *Client) WaitTemplate(ctx context.Context, ref string, progress func(TemplateEvent)) (Template, error) {
	err := c.TemplateEvents(ctx, ref, func(e TemplateEvent) error {
		if progress != nil {
			progress(e)
		}
		return nil
	})
	if err != nil {
		return Template{}, err
	}
	return c.GetTemplate(ctx, ref)
}
