package mcp

import (
	"context"
	"strings"
	"time"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	zeish "github.com/zeish/zeish/sdk/go"
)

// TemplateInfo is what the tools report about a template.
type TemplateInfo struct {
	ID          string   `json:"id" jsonschema:"template id (tpl_…); empty for a built-in not built yet"`
	Name        string   `json:"name" jsonschema:"template name; pass it (or the id) as create_sandbox's template"`
	State       string   `json:"state" jsonschema:"building, ready, error or deleted"`
	StateReason string   `json:"state_reason,omitempty" jsonschema:"why the build failed"`
	Builtin     bool     `json:"builtin" jsonschema:"a built-in template every account sees"`
	Source      string   `json:"source,omitempty" jsonschema:"where the image came from"`
	User        string   `json:"user,omitempty" jsonschema:"default user of commands"`
	WorkingDir  string   `json:"working_dir,omitempty" jsonschema:"default working folder of commands"`
	StartCmd    []string `json:"start_cmd,omitempty" jsonschema:"started at every boot"`
	DiskMiB     int      `json:"disk_mib" jsonschema:"root filesystem size in MiB"`
}

func templateInfo(t zeish.Template) TemplateInfo {
	return TemplateInfo{ID: t.ID, Name: t.Name, State: string(t.State), StateReason: t.StateReason, Builtin: t.Builtin,
		Source: t.Source, User: t.User, WorkingDir: t.WorkingDir, StartCmd: t.StartCmd, DiskMiB: t.DiskMiB}
}

type BuildTemplateInput struct {
	Name     string `json:"name" jsonschema:"template name: lowercase letters, digits and dashes"`
	From     string `json:"from" jsonschema:"image: registry:HOST/REPO:TAG, or a file on this machine as docker-archive:PATH, oci-archive:PATH or oci:DIR"`
	DiskMiB  int    `json:"disk_mib,omitempty" jsonschema:"root filesystem size in MiB (default 1024); the image must fit"`
	StartCmd string `json:"start_cmd,omitempty" jsonschema:"shell command started at every boot (default the image's entrypoint and command)"`
	// RegistrySecret names a stored secret; the agent never sees or passes the credential itself.
	MemoryMiB      int    `json:"memory_mib,omitempty" jsonschema:"memory of the warm machine in MiB (default 512): sandboxes created with this memory_mib start warm, others boot cold"`
	RegistrySecret string `json:"registry_secret,omitempty" jsonschema:"name of the account secret holding the registry's credentials (user:password or a token), stored beforehand with zeishctl secrets set"`
}

type TemplateRefInput struct {
	Template string `json:"template" jsonschema:"template id or name"`
}

type ListTemplatesInput struct {
	Name string `json:"name,omitempty" jsonschema:"only templates whose name contains this"`
}

type ListTemplatesOutput struct {
	Templates []TemplateInfo `json:"templates" jsonschema:"the account's templates and the built-ins"`
}

func (t *tools) addTemplateTools(s *sdkmcp.Server) {
	add(s, &sdkmcp.Tool{
		Name:  "build_template",
		Title: "Build template",
		Description: "Build a sandbox template from a container image and wait until it is ready (minutes for big images). " +
			"Its environment, working folder and user become the defaults of commands in sandboxes created from it.",
		Annotations: &sdkmcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(true)},
	}, t.buildTemplate)
	add(s, &sdkmcp.Tool{
		Name:        "list_templates",
		Title:       "List templates",
		Description: "List the templates sandboxes can be created from: the account's own and the built-ins (base, debian).",
		Annotations: &sdkmcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, t.listTemplates)
	add(s, &sdkmcp.Tool{
		Name:  "delete_template",
		Title: "Delete template",
		Description: "Delete one of the account's templates. Sandboxes already created from it keep working; " +
			"no new ones can be created from it.",
		Annotations: &sdkmcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: false, OpenWorldHint: ptr(false)},
	}, t.deleteTemplate)
}

func (t *tools) buildTemplate(ctx context.Context, in BuildTemplateInput) (TemplateInfo, error) {
	req := zeish.BuildTemplateRequest{Name: in.Name, DiskMiB: in.DiskMiB, MemoryMiB: in.MemoryMiB, RegistrySecret: in.RegistrySecret}
	if in.StartCmd != "" {
		req.StartCmd = []string{"/bin/sh", "-c", in.StartCmd}
	}
	tpl, err := t.client.BuildTemplateFrom(ctx, req, in.From)
	if err != nil {
		return TemplateInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	tpl, err = t.client.WaitTemplate(ctx, tpl.ID, nil)
	if err != nil {
		return TemplateInfo{}, err
	}
	return templateInfo(tpl), nil
}

func (t *tools) listTemplates(ctx context.Context, in ListTemplatesInput) (ListTemplatesOutput, error) {
	list, err := t.client.ListTemplates(ctx)
	if err != nil {
		return ListTemplatesOutput{}, err
	}
	out := ListTemplatesOutput{Templates: []TemplateInfo{}}
	for _, tpl := range list {
		if strings.Contains(tpl.Name, in.Name) {
			out.Templates = append(out.Templates, templateInfo(tpl))
		}
	}
	return out, nil
}

func (t *tools) deleteTemplate(ctx context.Context, in TemplateRefInput) (TemplateInfo, error) {
	if in.Template == "" {
		return TemplateInfo{}, invalidArgf("template is required")
	}
	tpl, err := t.client.DeleteTemplate(ctx, in.Template)
	if err != nil {
		return TemplateInfo{}, err
	}
	return templateInfo(tpl), nil
}
