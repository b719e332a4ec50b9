package zeish

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
)

// recorded is what the fake saw of one request.
type recorded struct {
	Method, Path, RawQuery, Auth string
	Body                         string
}

// fakeServer is a zeishd stand-in: routes are Go 1.22 mux patterns, and every
// request is recorded before its handler runs.
type fakeServer struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

func newFake(t *testing.T, routes map[string]http.HandlerFunc) *fakeServer {
	t.Helper()
	f := &fakeServer{}
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.HandleFunc(pattern, h)
	}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := recorded{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Auth: r.Header.Get("Authorization")}
		// Raw uploads are left for the handler to stream; JSON bodies are
		// recorded whole.
		if r.Header.Get("Content-Type") == "application/json" {
			b, _ := io.ReadAll(r.Body)
			rec.Body = string(b)
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, rec)
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) last() recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		return recorded{}
	}
	return f.reqs[len(f.reqs)-1]
}

func (f *fakeServer) all() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

func (f *fakeServer) client() *Client {
	return NewClient(f.URL+api.BasePath, "key-1")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func reply(status int, v any) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, status, v) }
}

func replyError(status int, code, msg string) http.HandlerFunc {
	return reply(status, api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}})
}

// accessRoute hands out data-plane access for any sandbox, pointing at the
// fake's own /data/v1, with a fresh token each time.
func accessRoute(ttl time.Duration) http.HandlerFunc {
	var mu sync.Mutex
	n := 0
	return func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		tok := fmt.Sprintf("tok-%d", n)
		mu.Unlock()
		writeJSON(w, http.StatusOK, api.Access{
			URL:       api.DataPath + "/sandboxes/" + r.PathValue("id"),
			Token:     tok,
			ExpiresAt: now().Add(ttl),
		})
	}
}
