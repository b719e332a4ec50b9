package cli

import (
	"errors"
	"fmt"
	"io"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/zeish/zeish/internal/mcp"
	zeish "github.com/zeish/zeish/sdk/go"
)

func (a *app) mcpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve zeish to AI agents over MCP (Model Context Protocol) on stdin/stdout",
		Long: `Serve the Model Context Protocol on stdin and stdout, so an AI agent can create
sandboxes, run commands, move files, clone and snapshot through zeish's API.
Add it to an MCP client as the command "zeishctl mcp"; it uses the same
ZEISH_API_URL and ZEISH_API_KEY (or admin.key) as every other command.
Tools: create_sandbox, list_sandboxes, delete_sandbox, exec, read_file,
write_file, list_files, clone_sandbox, create_snapshot, restore_snapshot.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.apiKey == "" {
				if _, err := zeish.KeyFromEnv(); err != nil {
					// Still serve: the agent sees "unauthenticated" on its
					// first call, and the client's log shows this line.
					fmt.Fprintf(a.err, "zeishctl mcp: warning: %s\n", termSafe(err.Error()))
				}
			}
			transport := &sdkmcp.IOTransport{Reader: io.NopCloser(a.in), Writer: nopWriteCloser{a.out}}
			err := mcp.Serve(cmd.Context(), a.sdk(), Version, transport)
			// The client closing stdin is how a stdio session ends.
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		},
	}
}

// nopWriteCloser keeps the transport from closing zeishctl's stdout.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
