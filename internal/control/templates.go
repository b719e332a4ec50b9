package control

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/template"
)

// Templates (docs/templates.md): the built-in ones, and those an account
// builds from a container image.

// Template build limits.
const (
	minTemplateDiskMiB = 64
	maxCmdArgs         = 256
	// maxReadyTimeoutSeconds bounds a warm build's wait for its ready command.
	maxReadyTimeoutSeconds = 3600
)

// NodeTemplates builds, deletes and follows templates on nodes (the
// cluster's Router): a template built from an image lives on the node
// that built it (its Host).
type NodeTemplates interface {
	// BuildTemplate builds req on the node with the most free disk,
	// streaming its upload there.
	BuildTemplate(ctx context.Context, req catalog.BuildRequest) (sandbox.Template, error)
	DeleteTemplate(ctx context.Context, node, accountID, ref string) (sandbox.Template, error)
	// FollowTemplate calls fn with template id's build log from event
	// from on, until the build ends or ctx does.
	FollowTemplate(ctx context.Context, node, id string, from int, fn func(catalog.Event) error) error
}

// templatesOn is where template t's build, log and delete are: its node's,
// or this process's catalog (one zeishd; a template no node holds).
func (c *Control) templatesOn(t sandbox.Template) (NodeTemplates, bool) {
	nt, ok := c.node.(NodeTemplates)
	return nt, ok && t.Host != ""
}

// BuildTemplate starts building req for the caller, from upload (an image
// archive streamed in; nil when req.From names the image): here, or on a
// node of the cluster, which keeps the files.
func (c *Control) BuildTemplate(ctx context.Context, who Caller, req api.BuildTemplateRequest, upload io.Reader) (sandbox.Template, error) {
	breq, err := c.buildRequest(ctx, who, req, upload != nil)
	if err != nil {
		return sandbox.Template{}, err
	}
	breq.Upload = upload
	if nt, ok := c.node.(NodeTemplates); ok {
		return nt.BuildTemplate(ctx, breq)
	}
	return c.catalog.Build(ctx, breq)
}

// buildRequest validates a build request.
func (c *Control) buildRequest(ctx context.Context, who Caller, req api.BuildTemplateRequest, upload bool) (catalog.BuildRequest, error) {
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
		if src.Transport != template.TransportRegistry && !who.Account.Admin {
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
	for _, cmd := range [][]string{req.StartCmd, req.ReadyCmd} {
		if len(cmd) > maxCmdArgs {
			return catalog.BuildRequest{}, invalid("start_cmd and ready_cmd take at most %d arguments", maxCmdArgs)
		}
	}
	if req.RegistrySecret != "" {
		// Read last, once the request is otherwise valid; the value lives
		// in this build's memory only (the build keeps the secret's name).
		value, err := c.accountSecret(ctx, who.Account.ID, "registry_secret", req.RegistrySecret)
		if err != nil {
			return catalog.BuildRequest{}, err
		}
		src.Username, src.Password, src.Token = template.RegistryCredentials(value)
	}
	return catalog.BuildRequest{AccountID: who.Account.ID, Name: req.Name, Source: src, DiskMiB: req.DiskMiB, RegistrySecret: req.RegistrySecret,
		StartCmd: req.StartCmd, ReadyCmd: req.ReadyCmd, ReadyTimeoutSeconds: req.ReadyTimeoutSeconds, Cold: req.Cold,
		VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB}, nil
}

// Templates lists the templates the caller may use: the built-in ones and
// its account's.
func (c *Control) Templates(ctx context.Context, who Caller) (api.TemplateList, error) {
	ts, err := c.catalog.List(ctx, who.Account.ID)
	if err != nil {
		return api.TemplateList{}, err
	}
	return api.TemplateList{Templates: ts}, nil
}

// Template is the template ref (an id or a name) as the caller sees it.
func (c *Control) Template(ctx context.Context, who Caller, ref string) (sandbox.Template, error) {
	return c.catalog.Resolve(ctx, who.Account.ID, ref)
}

// TemplateKnown says whether a template of that name exists for the
// caller: its account's own or a built-in, never another account's (E2B's
// alias lookup).
func (c *Control) TemplateKnown(ctx context.Context, who Caller, name string) error {
	return c.catalog.Known(ctx, who.Account.ID, name)
}

// DeleteTemplate hides the caller's template ref at once; its files are
// swept (on its node) when nothing uses them.
func (c *Control) DeleteTemplate(ctx context.Context, who Caller, ref string) (sandbox.Template, error) {
	t, err := c.catalog.Resolve(ctx, who.Account.ID, ref)
	if err != nil {
		return t, err
	}
	if nt, ok := c.templatesOn(t); ok {
		return nt.DeleteTemplate(ctx, t.Host, who.Account.ID, ref)
	}
	return c.catalog.Delete(ctx, who.Account.ID, ref)
}

// FollowTemplate calls fn with the build log of template t (the caller's,
// from Template) from event from on, until the build ends, fn fails or
// ctx ends.
func (c *Control) FollowTemplate(ctx context.Context, t sandbox.Template, from int, fn func(api.TemplateEvent) error) error {
	each := func(e catalog.Event) error {
		ev := api.TemplateEvent{Type: e.Type, Time: e.Time.Format(time.RFC3339Nano), Message: e.Message, Template: e.Template}
		if p := e.Progress; p != nil {
			ev.Progress = &api.TemplateProgress{Step: p.Step, Layer: p.Layer, Layers: p.Layers, Bytes: p.Bytes, Total: p.Total, Message: p.Message}
		}
		return fn(ev)
	}
	if nt, ok := c.templatesOn(t); ok {
		return nt.FollowTemplate(ctx, t.Host, t.ID, from, each)
	}
	return c.catalog.Follow(ctx, t.ID, from, each)
}
