package mcp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/zeish/zeish/api"
)

func TestDesktopTools(t *testing.T) {
	png := []byte("\x89PNG-fake")
	var mu sync.Mutex
	var sent []string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/public/sandboxes/{id}/access", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.Access{URL: "/data/v1/sbx_d", Token: "tok", ExpiresAt: time.Now().Add(time.Hour)})
	})
	mux.HandleFunc("POST /data/v1/sbx_d/desktop/actions", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		sent = append(sent, strings.TrimSpace(string(b)))
		mu.Unlock()
		var a api.DesktopAction
		json.Unmarshal(b, &a)
		switch {
		case a.Action == "screenshot":
			json.NewEncoder(w).Encode(api.DesktopActionResult{X: 3, Y: 4, Image: png, Width: 1280, Height: 800})
		case a.X != nil && *a.X > 1279:
			w.WriteHeader(400)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: "off_screen", Message: "off the 1280x800 screen"}})
		default:
			json.NewEncoder(w).Encode(api.DesktopActionResult{X: 5, Y: 6})
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	cs := connect(t, srv.URL)
	ctx := context.Background()
	call := func(name string, args map[string]any) *sdkmcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdkmcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: protocol error %v", name, err)
		}
		return res
	}

	res := call("screenshot", map[string]any{"sandbox_id": "sbx_d"})
	img, ok := res.Content[0].(*sdkmcp.ImageContent)
	if res.IsError || !ok || string(img.Data) != string(png) || img.MIMEType != "image/png" {
		t.Fatalf("screenshot: %+v", res)
	}
	var shot ScreenshotOutput
	raw, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(raw, &shot)
	if shot != (ScreenshotOutput{Width: 1280, Height: 800, CursorX: 3, CursorY: 4}) {
		t.Errorf("screenshot structured %+v", shot)
	}

	for _, tt := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"click", map[string]any{"sandbox_id": "sbx_d", "x": 10, "y": 20}, `{"action":"left_click","x":10,"y":20}`},
		{"click", map[string]any{"sandbox_id": "sbx_d", "x": 10, "y": 20, "button": "double"}, `{"action":"double_click","x":10,"y":20}`},
		{"type", map[string]any{"sandbox_id": "sbx_d", "text": "ls\n"}, `{"action":"type","text":"ls\n"}`},
		{"key", map[string]any{"sandbox_id": "sbx_d", "keys": "ctrl+c"}, `{"action":"key","keys":"ctrl+c"}`},
	} {
		mu.Lock()
		sent = nil
		mu.Unlock()
		res := call(tt.tool, tt.args)
		if res.IsError {
			t.Errorf("%s: %v", tt.tool, res.Content[0])
			continue
		}
		mu.Lock()
		if len(sent) != 1 || sent[0] != tt.want {
			t.Errorf("%s sent %q, want %s", tt.tool, sent, tt.want)
		}
		mu.Unlock()
	}

	res = call("click", map[string]any{"sandbox_id": "sbx_d", "x": 5000, "y": 1})
	if text := res.Content[0].(*sdkmcp.TextContent).Text; !res.IsError || !strings.HasPrefix(text, "off_screen:") {
		t.Errorf("click off screen: %v %q", res.IsError, text)
	}
	res = call("click", map[string]any{"sandbox_id": "sbx_d", "x": 1, "y": 1, "button": "sideways"})
	if text := res.Content[0].(*sdkmcp.TextContent).Text; !res.IsError || !strings.HasPrefix(text, "invalid_argument:") {
		t.Errorf("click with a bad button: %v %q", res.IsError, text)
	}
}
