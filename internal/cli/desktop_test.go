package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
)

// desktopFake serves access, desktop actions (recording their bodies; x
// 5000 is off the screen) and a screenshot.
func desktopFake(t *testing.T) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var bodies []string
	send := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/public/sandboxes/{id}/access", func(w http.ResponseWriter, r *http.Request) {
		send(w, 200, api.Access{URL: "/data/v1/sandboxes/" + r.PathValue("id"), Token: "data-token", ExpiresAt: time.Now().Add(time.Hour)})
	})
	mux.HandleFunc("POST /data/v1/sandboxes/{id}/desktop/actions", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		var a api.DesktopAction
		json.Unmarshal(b, &a)
		if a.X != nil && *a.X == 5000 {
			send(w, 400, api.ErrorBody{Error: api.ErrorDetail{Code: "off_screen", Message: "x, y = 5000, 1 is off the 1280x800 screen"}})
			return
		}
		send(w, 200, api.DesktopActionResult{X: 7, Y: 8})
	})
	mux.HandleFunc("GET /data/v1/sandboxes/{id}/desktop/screenshot", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG-fake"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), bodies...)
	}
}

func TestDesktopCommands(t *testing.T) {
	tests := []struct {
		args     []string
		wantBody string
	}{
		{[]string{"desktop", "click", "sbx_1", "10", "20"}, `{"action":"left_click","x":10,"y":20}`},
		{[]string{"desktop", "click", "sbx_1", "10", "20", "--button", "double"}, `{"action":"double_click","x":10,"y":20}`},
		{[]string{"desktop", "move", "sbx_1", "0", "0"}, `{"action":"mouse_move","x":0,"y":0}`},
		{[]string{"desktop", "drag", "sbx_1", "1", "2", "3", "4"}, `{"action":"drag","x":1,"y":2,"to_x":3,"to_y":4}`},
		{[]string{"desktop", "type", "sbx_1", "echo hi"}, `{"action":"type","text":"echo hi"}`},
		{[]string{"desktop", "key", "sbx_1", "ctrl+c"}, `{"action":"key","keys":"ctrl+c"}`},
		{[]string{"desktop", "scroll", "sbx_1", "5", "6", "--direction", "up"}, `{"action":"scroll","x":5,"y":6,"direction":"up","amount":3}`},
		{[]string{"desktop", "cursor", "sbx_1"}, `{"action":"cursor_position"}`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args[1:], " "), func(t *testing.T) {
			srv, bodies := desktopFake(t)
			r := zeishctl(t, srv.URL, nil, tt.args...)
			if r.code != 0 || r.stdout != "cursor at 7,8\n" {
				t.Fatalf("code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
			}
			if got := bodies(); len(got) != 1 || strings.TrimSpace(got[0]) != tt.wantBody {
				t.Errorf("sent %q, want %s", got, tt.wantBody)
			}
		})
	}

	srv, bodies := desktopFake(t)
	file := filepath.Join(t.TempDir(), "shot.png")
	if r := zeishctl(t, srv.URL, nil, "desktop", "screenshot", "sbx_1", file); r.code != 0 {
		t.Fatalf("screenshot: %+v", r)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "\x89PNG-fake" {
		t.Errorf("screenshot file %q %v", b, err)
	}
	if r := zeishctl(t, srv.URL, nil, "desktop", "click", "sbx_1", "5000", "1"); r.code != 1 || !strings.Contains(r.stderr, "(code off_screen)") {
		t.Errorf("click off screen: %+v", r)
	}
	before := len(bodies())
	for _, args := range [][]string{
		{"desktop", "click", "sbx_1", "1", "2", "--button", "sideways"},
		{"desktop", "click", "sbx_1", "x", "2"},
		{"desktop", "click", "sbx_1", "1"},
	} {
		if r := zeishctl(t, srv.URL, nil, args...); r.code != 2 {
			t.Errorf("%q: code %d (stderr %q), want 2", args, r.code, r.stderr)
		}
	}
	if len(bodies()) != before {
		t.Error("a usage error reached the server")
	}
}
