package mcp

import (
	"context"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	zeish "github.com/zeish/zeish/sdk/go"
)

type GitStatusInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox created with a git repository (sbx_… or its name)"`
}

func (t *tools) addGitTools(s *sdkmcp.Server) {
	add(s, &sdkmcp.Tool{
		Name:  "git_status",
		Title: "Git status",
		Description: "Read the git clone of a sandbox created with git_repo: its path, the checked-out branch, " +
			"the HEAD commit and the files that differ from HEAD (status letters as git status --short shows them). " +
			"To work on another branch, clone the sandbox with git_branch or pr_number.",
		Annotations: &sdkmcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, t.gitStatus)
}

func (t *tools) gitStatus(ctx context.Context, in GitStatusInput) (zeish.GitStatus, error) {
	return t.client.GitStatus(ctx, in.SandboxID)
}
