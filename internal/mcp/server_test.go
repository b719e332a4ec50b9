package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/guest"
	zeish "github.com/zeish/zeish/sdk/go"
)

// fakeAPI answers /access for sbx_known and runs every exec as a command
// that prints its argv joined by spaces, 100 KiB of x on stderr, and exits 3.
func fakeAPI(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/public/sandboxes/{id}/access", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "sbx_known" {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: "not_found", Message: "no sandbox " + r.PathValue("id")}})
			return
		}
		json.NewEncoder(w).Encode(api.Access{URL: "/data/v1/sbx_known", Token: "tok", ExpiresAt: time.Now().Add(time.Hour)})
	})
	mux.HandleFunc("POST /data/v1/sbx_known/exec", func(w http.ResponseWriter, r *http.Request) {
		var req api.ExecRequest
		json.NewDecoder(r.Body).Decode(&req)
		enc := json.NewEncoder(w)
		enc.Encode(api.ExecEvent{Type: api.EventStdout, Data: []byte(strings.Join(req.Argv, " ") + "\n")})
		enc.Encode(api.ExecEvent{Type: api.EventStderr, Data: []byte(strings.Repeat("x", 100<<10))})
		enc.Encode(api.ExecEvent{Type: api.EventExit, Result: &guest.ExecResult{ExitCode: 3}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func connect(t *testing.T, baseURL string) *sdkmcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	serverT, clientT := sdkmcp.NewInMemoryTransports()
	server := NewServer(zeish.NewClient(baseURL+api.BasePath, "key"), "test")
	ss, err := server.Connect(ctx, serverT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdkmcp.NewClient(&sdkmcp.Implementation{Name: "test"}, nil).Connect(ctx, clientT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestTools(t *testing.T) {
	cs := connect(t, fakeAPI(t).URL)
	ctx := context.Background()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) != 19 {
		t.Errorf("%d tools, want 19", len(list.Tools))
	}
	for _, tool := range list.Tools {
		if tool.Description == "" || tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("tool %s lacks a description or a schema", tool.Name)
		}
	}

	tests := []struct {
		name     string
		args     map[string]any
		wantErr  string // prefix of the error text; empty: success
		wantOut  string
		truncErr bool
	}{
		{"command", map[string]any{"sandbox_id": "sbx_known", "command": "echo hi"}, "", "sh -c echo hi\n", true},
		{"argv", map[string]any{"sandbox_id": "sbx_known", "argv": []string{"ls", "/"}}, "", "ls /\n", true},
		{"unknown sandbox", map[string]any{"sandbox_id": "sbx_nope", "command": "true"}, "not_found: no sandbox sbx_nope", "", false},
		{"neither", map[string]any{"sandbox_id": "sbx_known"}, "invalid_argument:", "", false},
		{"both", map[string]any{"sandbox_id": "sbx_known", "command": "x", "argv": []string{"x"}}, "invalid_argument:", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := cs.CallTool(ctx, &sdkmcp.CallToolParams{Name: "exec", Arguments: tt.args})
			if err != nil {
				t.Fatalf("protocol error %v; tool errors must be results", err)
			}
			text := res.Content[0].(*sdkmcp.TextContent).Text
			if tt.wantErr != "" {
				if !res.IsError || !strings.HasPrefix(text, tt.wantErr) {
					t.Fatalf("IsError %v, text %q; want an error starting %q", res.IsError, text, tt.wantErr)
				}
				return
			}
			if res.IsError {
				t.Fatalf("tool error %q", text)
			}
			var out ExecOutput
			raw, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(raw, &out)
			if out.Stdout != tt.wantOut || out.ExitCode != 3 || out.StdoutTruncated || out.StderrTruncated != tt.truncErr {
				t.Fatalf("got %+v", out)
			}
			if len(out.Stderr) > maxStreamBytes+100 {
				t.Fatalf("stderr is %d bytes, want it capped near %d", len(out.Stderr), maxStreamBytes)
			}
		})
	}
}

func TestCappedBuffer(t *testing.T) {
	b := newCappedBuffer(10)
	for _, chunk := range []string{"abc", "defgh", "ijklmnopqrstuvwxyz", "0123"} {
		b.Write([]byte(chunk))
	}
	if got, want := b.String(), "abcde\n[… 20 bytes omitted …]\nz0123"; got != want || !b.Truncated() {
		t.Fatalf("got %q, want %q", got, want)
	}
	small := newCappedBuffer(10)
	small.Write([]byte("0123456789"))
	if small.String() != "0123456789" || small.Truncated() {
		t.Fatalf("a buffer at its limit must be whole: %q", small.String())
	}
}

func TestIsText(t *testing.T) {
	for _, tt := range []struct {
		data      string
		truncated bool
		want      bool
	}{
		{"hello\n", false, true},
		{"a\x00b", false, false},
		{"\xff\xfe", false, false},
		{"caf\xc3", true, true},   // cut inside é
		{"caf\xc3", false, false}, // not cut: invalid
	} {
		if got := isText([]byte(tt.data), tt.truncated); got != tt.want {
			t.Errorf("isText(%q, %v) = %v", tt.data, tt.truncated, got)
		}
	}
}
