// Package mcp serves zeish to AI agents over the Model Context Protocol: each
// tool (create_sandbox, exec, read_file, clone_sandbox, …) is a thin call into
// the public Go SDK, so an agent can do exactly what an SDK user can. Errors
// the API returns become tool errors that carry the API's stable code, so the
// model sees them and can correct itself; they are never protocol errors.
package mcp

import (
	"context"
	"errors"
	"fmt"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/zeish/zeish/errdefs"
	zeish "github.com/zeish/zeish/sdk/go"
)

// instructions are shown to the agent when it connects.
const instructions = `zeish runs sandboxes: isolated Linux virtual machines (each with its own kernel) that can be
forked while running and snapshotted. Typical flow: create_sandbox (waits until it runs), then exec
commands and read_file/write_file in it; clone_sandbox forks a prepared sandbox into copies that carry on
from the same point (files, processes, memory); create_snapshot/restore_snapshot roll a sandbox back.
Sandbox ids look like sbx_…, snapshot ids like snp_…. Delete sandboxes you no longer need with
delete_sandbox: they hold memory and cost money while they exist. Tool errors carry a stable code
(not_found, invalid_argument, invalid_state, node_full, …) followed by a message.`

// NewServer returns an MCP server whose tools act through client.
func NewServer(client *zeish.Client, version string) *sdkmcp.Server {
	s := sdkmcp.NewServer(&sdkmcp.Implementation{Name: "zeish", Title: "zeish sandboxes", Version: version},
		&sdkmcp.ServerOptions{Instructions: instructions})
	t := &tools{client: client}
	t.addSandboxTools(s)
	t.addNetworkTools(s)
	t.addExecTool(s)
	t.addFileTools(s)
	t.addTemplateTools(s)
	t.addGitTools(s)
	t.addDesktopTools(s)
	t.addBrowserTool(s)
	return s
}

// Serve runs the MCP server over transport (stdio for zeishctl mcp) until the
// client disconnects or ctx ends.
func Serve(ctx context.Context, client *zeish.Client, version string, transport sdkmcp.Transport) error {
	return NewServer(client, version).Run(ctx, transport)
}

// tools holds what every tool handler needs.
type tools struct {
	client *zeish.Client
}

// toolError is an error reported to the agent as a tool result with
// IsError set: its text starts with the API's stable code.
type toolError struct {
	code    string
	message string
}

func (e *toolError) Error() string { return e.code + ": " + e.message }

// asToolError turns what the SDK returned into the error text an agent reads:
// "<code>: <message>". Errors that are not the API's (a refused connection,
// say) keep their own text under the code "unavailable" or "internal".
func asToolError(err error) error {
	var apiErr *zeish.APIError
	switch {
	case errors.As(err, &apiErr):
		return &toolError{code: apiErr.Code, message: apiErr.Message}
	case errors.Is(err, context.DeadlineExceeded):
		return &toolError{code: "timeout", message: err.Error()}
	case errors.Is(err, context.Canceled):
		return &toolError{code: "cancelled", message: err.Error()}
	}
	var te *toolError
	if errors.As(err, &te) {
		return te
	}
	// An SDK check that failed before any request (WaitForState seeing a
	// sandbox in error, say) still names its class.
	var sentinel *errdefs.Error
	if errors.As(err, &sentinel) {
		return &toolError{code: sentinel.Code, message: err.Error()}
	}
	return &toolError{code: "unavailable", message: err.Error()}
}

// invalidArgf is a bad tool input caught before any API call.
func invalidArgf(format string, args ...any) error {
	return &toolError{code: "invalid_argument", message: fmt.Sprintf(format, args...)}
}

// add registers a typed tool whose handler only maps input to output; every
// error it returns becomes a tool error with a code.
func add[In, Out any](s *sdkmcp.Server, tool *sdkmcp.Tool, fn func(context.Context, In) (Out, error)) {
	sdkmcp.AddTool(s, tool, func(ctx context.Context, _ *sdkmcp.CallToolRequest, in In) (*sdkmcp.CallToolResult, Out, error) {
		out, err := fn(ctx, in)
		if err != nil {
			var zero Out
			return nil, zero, asToolError(err)
		}
		return nil, out, nil
	})
}

func ptr[T any](v T) *T { return &v }
