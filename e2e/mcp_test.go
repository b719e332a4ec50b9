package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/zeish/zeish/internal/mcp"
	"github.com/zeish/zeish/internal/testenv"
)

// mcpSession runs `zeishctl mcp` against s and connects an MCP client to it
// over the command's stdin and stdout, as an agent's host would.
func (s *server) mcpSession(t *testing.T, ctx context.Context) *sdkmcp.ClientSession {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "zeishctl"), "mcp")
	cmd.Env = append(os.Environ(), "ZEISH_API_URL="+s.url(), "ZEISH_API_KEY="+s.key)
	var stderr testenv.LogBuffer
	cmd.Stderr = &stderr
	client := sdkmcp.NewClient(&sdkmcp.Implementation{Name: "zeish-e2e", Version: "test"}, nil)
	cs, err := client.Connect(ctx, &sdkmcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to zeishctl mcp: %v", err)
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Logf("closing the MCP session: %v", err)
		}
		if t.Failed() {
			t.Logf("zeishctl mcp stderr:\n%s", stderr.String())
		}
	})
	return cs
}

// callTool calls a tool, fails the test on a protocol or tool error, and
// decodes the structured result into out.
func callTool(t *testing.T, ctx context.Context, cs *sdkmcp.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	start := time.Now()
	res, err := cs.CallTool(ctx, &sdkmcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s(%v): tool error: %s", name, args, toolText(res))
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: decoding %s: %v", name, raw, err)
	}
	t.Logf("%s took %v", name, time.Since(start).Round(time.Millisecond))
}

func toolText(res *sdkmcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdkmcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// TestMCP drives one real sandbox and one clone of it through `zeishctl mcp`
// with the MCP Go SDK's client, as an agent would.
func TestMCP(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cs := s.mcpSession(t, ctx)

	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"browser_url", "build_template", "click", "clone_sandbox", "create_sandbox", "create_snapshot", "delete_sandbox", "delete_template", "exec",
		"git_status", "key", "list_files", "list_sandboxes", "list_templates", "read_file", "restore_snapshot", "screenshot", "set_network", "type", "write_file"}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		in, _ := tool.InputSchema.(map[string]any)
		if in["type"] != "object" || len(in["properties"].(map[string]any)) == 0 || tool.OutputSchema == nil {
			t.Errorf("tool %s: input schema %v, output schema %v; want typed objects", tool.Name, in, tool.OutputSchema)
		}
		if len(tool.Description) < 40 {
			t.Errorf("tool %s: description %q is too thin for an agent", tool.Name, tool.Description)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	for _, tool := range list.Tools {
		if tool.Name != "exec" {
			continue
		}
		props := tool.InputSchema.(map[string]any)["properties"].(map[string]any)
		for _, p := range []string{"sandbox_id", "argv", "command", "cwd", "env", "timeout_seconds", "stdin"} {
			if props[p] == nil {
				t.Errorf("exec input has no %q", p)
			}
		}
	}

	// An API error is a tool result the agent can read, with the code.
	res, err := cs.CallTool(ctx, &sdkmcp.CallToolParams{Name: "exec",
		Arguments: map[string]any{"sandbox_id": "sbx_00000000000000000000", "command": "true"}})
	if err != nil {
		t.Fatalf("exec on an unknown sandbox: protocol error %v; want a tool error", err)
	}
	if !res.IsError || !strings.HasPrefix(toolText(res), "not_found: ") {
		t.Fatalf("exec on an unknown sandbox: IsError %v, %q; want an error starting not_found", res.IsError, toolText(res))
	}

	var sb mcp.SandboxInfo
	callTool(t, ctx, cs, "create_sandbox", map[string]any{"name": "mcp-box", "memory_mib": 256, "env": map[string]string{"GREETING": "hello"}}, &sb)
	if sb.State != "running" || sb.Name != "mcp-box" || sb.MemoryMiB != 256 || !strings.HasPrefix(sb.ID, "sbx_") {
		t.Fatalf("create_sandbox: %+v", sb)
	}

	var ex mcp.ExecOutput
	callTool(t, ctx, cs, "exec", map[string]any{"sandbox_id": sb.ID, "command": "echo hi"}, &ex)
	if ex.Stdout != "hi\n" || ex.Stderr != "" || ex.ExitCode != 0 || ex.TimedOut {
		t.Fatalf("exec echo hi: %+v", ex)
	}
	// The sandbox's name works wherever its id does.
	callTool(t, ctx, cs, "exec", map[string]any{"sandbox_id": "mcp-box", "command": "hostname"}, &ex)
	if ex.Stdout != "mcp-box\n" || ex.ExitCode != 0 {
		t.Fatalf("exec by name: %+v", ex)
	}
	callTool(t, ctx, cs, "exec", map[string]any{"sandbox_id": sb.ID, "argv": []string{"sh", "-c", "cat; echo $GREETING $EXTRA >&2; exit 5"},
		"stdin": "piped\n", "env": map[string]string{"EXTRA": "there"}, "cwd": "/root"}, &ex)
	if ex.Stdout != "piped\n" || ex.Stderr != "hello there\n" || ex.ExitCode != 5 {
		t.Fatalf("exec with argv, stdin and env: %+v", ex)
	}

	var written mcp.FileEntry
	callTool(t, ctx, cs, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "/root/work/note.txt", "content": "from mcp\n"}, &written)
	if written.Size != int64(len("from mcp\n")) {
		t.Fatalf("write_file: %+v", written)
	}
	var read mcp.ReadFileOutput
	callTool(t, ctx, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "/root/work/note.txt"}, &read)
	if read.Content != "from mcp\n" || read.Encoding != "text" || read.Truncated {
		t.Fatalf("read_file: %+v", read)
	}
	binary := []byte{0, 1, 2, 0xff, 0xfe, '\n'}
	callTool(t, ctx, cs, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "/root/work/blob.bin",
		"content": base64.StdEncoding.EncodeToString(binary), "encoding": "base64"}, &written)
	callTool(t, ctx, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "/root/work/blob.bin"}, &read)
	if got, _ := base64.StdEncoding.DecodeString(read.Content); read.Encoding != "base64" || !bytes.Equal(got, binary) {
		t.Fatalf("read_file of binary: %+v", read)
	}
	var ls mcp.ListFilesOutput
	callTool(t, ctx, cs, "list_files", map[string]any{"sandbox_id": sb.ID, "path": "/root/work"}, &ls)
	if len(ls.Files) != 2 {
		t.Fatalf("list_files /root/work: %+v", ls.Files)
	}

	var clone mcp.CloneSandboxOutput
	callTool(t, ctx, cs, "clone_sandbox", map[string]any{"sandbox_id": sb.ID, "count": 1, "name": "mcp-child"}, &clone)
	if len(clone.Sandboxes) != 1 || clone.Sandboxes[0].State != "running" || clone.Sandboxes[0].ParentID != sb.ID ||
		clone.Sandboxes[0].Name != "mcp-child" || clone.PauseMS <= 0 {
		t.Fatalf("clone_sandbox: %+v", clone)
	}
	child := clone.Sandboxes[0]
	t.Logf("clone paused the parent %d ms", clone.PauseMS)
	callTool(t, ctx, cs, "exec", map[string]any{"sandbox_id": child.ID, "command": "cat /root/work/note.txt; hostname"}, &ex)
	if !strings.HasPrefix(ex.Stdout, "from mcp\n") || ex.ExitCode != 0 {
		t.Fatalf("exec in the clone: %+v", ex)
	}

	var listed mcp.ListSandboxesOutput
	callTool(t, ctx, cs, "list_sandboxes", map[string]any{"state": "running"}, &listed)
	if len(listed.Sandboxes) != 2 {
		t.Fatalf("list_sandboxes running: %+v", listed.Sandboxes)
	}
	for _, id := range []string{child.ID, sb.ID} {
		var gone mcp.SandboxInfo
		callTool(t, ctx, cs, "delete_sandbox", map[string]any{"sandbox_id": id}, &gone)
		if gone.State != "destroyed" {
			t.Fatalf("delete_sandbox %s: %+v", id, gone)
		}
	}
}
