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
	if len(list.Tools) != 20 {
		t.Errorf("%d tools, want 20", len(list.Tools))
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

// set_network passes the rate caps through: a value (0 included) replaces
// the sandbox's, an omitted one leaves it (issue 14: caps changed live).
func TestSetNetworkRates(t *testing.T) {
	bodies := make(chan map[string]any, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("PATCH /api/v1/public/sandboxes/{id}/network", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		bodies <- body
		json.NewEncoder(w).Encode(map[string]any{"id": r.PathValue("id"), "network": map[string]any{"enabled": true, "egress": "allow",
			"allow": []string{}, "deny": []string{}, "rate_bytes_per_second": 1000}})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cs := connect(t, srv.URL)
	cases := []struct {
		name string
		args map[string]any
		want map[string]any // fields the request must carry (nil value: must be absent)
	}{
		{"a cap", map[string]any{"sandbox_id": "sbx_a", "rate_bytes_per_second": 1000}, map[string]any{"rate_bytes_per_second": 1000.0, "rate_packets_per_second": nil}},
		{"zero is the default, not unchanged", map[string]any{"sandbox_id": "sbx_a", "rate_packets_per_second": 0}, map[string]any{"rate_packets_per_second": 0.0, "rate_bytes_per_second": nil}},
		{"no caps", map[string]any{"sandbox_id": "sbx_a", "egress": "deny"}, map[string]any{"rate_bytes_per_second": nil, "rate_packets_per_second": nil}},
	}
	for _, c := range cases {
		res, err := cs.CallTool(context.Background(), &sdkmcp.CallToolParams{Name: "set_network", Arguments: c.args})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", c.name, err, res)
		}
		body := <-bodies
		for k, v := range c.want {
			got, ok := body[k]
			if v == nil && ok || v != nil && got != v {
				t.Errorf("%s: %s = %v (sent %v), want %v", c.name, k, got, ok, v)
			}
		}
		var out NetworkInfo
		raw, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(raw, &out)
		if out.RateBytes != 1000 {
			t.Errorf("%s: answer %+v lacks the cap", c.name, out)
		}
	}
}
