package zeish

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
)

var sbx1 = Sandbox{ID: "sbx_1", Name: "brave-otter-42", State: sandbox.StateRunning, Template: "base", VCPUs: 1, MemoryMiB: 512}

func TestControlPlaneRequests(t *testing.T) {
	tests := []struct {
		name      string
		call      func(ctx context.Context, c *Client) (any, error)
		route     string
		status    int
		resp      any
		wantQuery string
		wantBody  string // JSON, compared semantically; "" for no body
		wantAuth  string
		want      any
	}{
		{
			name:     "health at the root without key",
			call:     func(ctx context.Context, c *Client) (any, error) { return c.Health(ctx) },
			route:    "GET /healthz",
			resp:     Health{Status: "ok", Version: "0.1", Accel: "tcg", VMM: "qemu"},
			wantAuth: "",
			want:     Health{Status: "ok", Version: "0.1", Accel: "tcg", VMM: "qemu"},
		},
		{
			name: "create",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.CreateSandbox(ctx, CreateSandboxRequest{Template: "base", Size: "small", Env: map[string]string{"A": "1"}})
			},
			route:    "POST /api/v1/public/sandboxes",
			status:   http.StatusAccepted,
			resp:     sbx1,
			wantBody: `{"template":"base","size":"small","env":{"A":"1"}}`,
			wantAuth: "Bearer key-1",
			want:     sbx1,
		},
		{
			name:     "create account",
			call:     func(ctx context.Context, c *Client) (any, error) { return c.CreateAccount(ctx, "team-a") },
			route:    "POST /api/v1/admin/accounts",
			status:   http.StatusCreated,
			resp:     Account{ID: "acc_1", Name: "team-a"},
			wantBody: `{"name":"team-a"}`,
			wantAuth: "Bearer key-1",
			want:     Account{ID: "acc_1", Name: "team-a"},
		},
		{
			name:     "create key",
			call:     func(ctx context.Context, c *Client) (any, error) { return c.CreateAPIKey(ctx, "acc_1") },
			route:    "POST /api/v1/admin/accounts/acc_1/keys",
			status:   http.StatusCreated,
			resp:     CreatedAPIKey{ID: "key_1", AccountID: "acc_1", Key: "zk_x"},
			wantAuth: "Bearer key-1",
			want:     CreatedAPIKey{ID: "key_1", AccountID: "acc_1", Key: "zk_x"},
		},
		{
			name:      "list keys of an account",
			call:      func(ctx context.Context, c *Client) (any, error) { return c.ListAPIKeys(ctx, "acc_1") },
			route:     "GET /api/v1/admin/keys",
			resp:      api.APIKeyList{Keys: []APIKey{{ID: "key_1"}}},
			wantQuery: "account=acc_1",
			wantAuth:  "Bearer key-1",
			want:      []APIKey{{ID: "key_1"}},
		},
		{
			name:     "revoke key",
			call:     func(ctx context.Context, c *Client) (any, error) { return c.RevokeAPIKey(ctx, "key_1") },
			route:    "DELETE /api/v1/admin/keys/key_1",
			resp:     APIKey{ID: "key_1"},
			wantAuth: "Bearer key-1",
			want:     APIKey{ID: "key_1"},
		},
		{
			name: "usage in a window",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.Usage(ctx, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Time{})
			},
			route:     "GET /api/v1/public/usage",
			resp:      UsageReport{Total: Usage{CostMicros: 5}},
			wantQuery: "from=2026-01-01T00%3A00%3A00Z",
			wantAuth:  "Bearer key-1",
			want:      UsageReport{Total: Usage{CostMicros: 5}},
		},
		{
			name: "price estimate",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.EstimatePrice(ctx, EstimateRequest{Sandboxes: 2, Size: "medium", Minutes: 5})
			},
			route:     "GET /api/v1/public/pricing/estimate",
			resp:      PriceEstimate{Sandboxes: 2},
			wantQuery: "minutes=5&sandboxes=2&size=medium",
			wantAuth:  "Bearer key-1",
			want:      PriceEstimate{Sandboxes: 2},
		},
		{
			name: "create and wait",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.CreateSandbox(ctx, CreateSandboxRequest{Name: "x"}, Wait())
			},
			route:     "POST /api/v1/public/sandboxes",
			resp:      sbx1,
			wantQuery: "wait=true",
			wantBody:  `{"name":"x"}`,
			wantAuth:  "Bearer key-1",
			want:      sbx1,
		},
		{
			name: "list with filters",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.ListSandboxes(ctx, ListOptions{State: sandbox.StateRunning, IncludeDestroyed: true})
			},
			route:     "GET /api/v1/public/sandboxes",
			resp:      api.SandboxList{Sandboxes: []Sandbox{sbx1}},
			wantQuery: "include_destroyed=true&state=running",
			wantAuth:  "Bearer key-1",
			want:      []Sandbox{sbx1},
		},
		{
			name:     "get",
			call:     func(ctx context.Context, c *Client) (any, error) { return c.GetSandbox(ctx, "sbx_1") },
			route:    "GET /api/v1/public/sandboxes/sbx_1",
			resp:     sbx1,
			wantAuth: "Bearer key-1",
			want:     sbx1,
		},
		{
			name:      "delete and wait",
			call:      func(ctx context.Context, c *Client) (any, error) { return c.DeleteSandbox(ctx, "sbx_1", Wait()) },
			route:     "DELETE /api/v1/public/sandboxes/sbx_1",
			resp:      sbx1,
			wantQuery: "wait=true",
			wantAuth:  "Bearer key-1",
			want:      sbx1,
		},
		{
			name: "wait",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.WaitSandbox(ctx, "sbx_1", WaitRequest{State: sandbox.StateRunning, TimeoutSeconds: 30})
			},
			route:    "POST /api/v1/public/sandboxes/sbx_1/wait",
			resp:     sbx1,
			wantBody: `{"state":"running","timeout_seconds":30}`,
			wantAuth: "Bearer key-1",
			want:     sbx1,
		},
		{
			name: "access resolves a relative url",
			call: func(ctx context.Context, c *Client) (any, error) {
				acc, err := c.Access(ctx, "sbx_1", 2*time.Minute)
				if err != nil {
					return nil, err
				}
				if !strings.HasPrefix(acc.URL, "http://") || !strings.HasSuffix(acc.URL, "/data/v1/sandboxes/sbx_1") {
					return nil, errors.New("access url not absolute: " + acc.URL)
				}
				return acc.Token, nil
			},
			route:    "POST /api/v1/public/sandboxes/sbx_1/access",
			resp:     Access{URL: "/data/v1/sandboxes/sbx_1", Token: "t"},
			wantBody: `{"ttl_seconds":120}`,
			wantAuth: "Bearer key-1",
			want:     "t",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := tt.status
			if status == 0 {
				status = http.StatusOK
			}
			f := newFake(t, map[string]http.HandlerFunc{tt.route: reply(status, tt.resp)})
			c := f.client()
			if tt.name == "health at the root without key" {
				c = NewClient(f.URL+api.BasePath, "")
			}
			got, err := tt.call(context.Background(), c)
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			rec := f.last()
			if method, path, _ := strings.Cut(tt.route, " "); rec.Method != method || rec.Path != path {
				t.Errorf("request %s %s, want %s", rec.Method, rec.Path, tt.route)
			}
			if rec.RawQuery != tt.wantQuery {
				t.Errorf("query %q, want %q", rec.RawQuery, tt.wantQuery)
			}
			if rec.Auth != tt.wantAuth {
				t.Errorf("auth %q, want %q", rec.Auth, tt.wantAuth)
			}
			if !jsonEqual(t, rec.Body, tt.wantBody) {
				t.Errorf("body %s, want %s", rec.Body, tt.wantBody)
			}
			if !jsonEqual(t, mustJSON(t, got), mustJSON(t, tt.want)) {
				t.Errorf("result %s, want %s", mustJSON(t, got), mustJSON(t, tt.want))
			}
		})
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		name     string
		handler  http.HandlerFunc
		wantIs   error
		wantCode string
		wantMsg  string
	}{
		{"not found", replyError(404, "not_found", "no sandbox sbx_1"), errdefs.ErrNotFound, "not_found", "no sandbox sbx_1"},
		{"node full", replyError(409, "node_full", "host is full"), errdefs.ErrNodeFull, "node_full", "host is full"},
		{"unauthenticated", replyError(401, "unauthenticated", "bad key"), errdefs.ErrUnauthenticated, "unauthenticated", "bad key"},
		{"rate limited", replyError(429, "rate_limited", "slow down"), errdefs.ErrRateLimited, "rate_limited", "slow down"},
		{"non-json 502 from a proxy", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "bad gateway", http.StatusBadGateway)
		}, errdefs.ErrUnavailable, "unavailable", "bad gateway"},
		{"empty 404", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(404) }, errdefs.ErrNotFound, "not_found", "Not Found"},
		{"500 with a request id", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(500)
			w.Write([]byte(`{"error":{"code":"internal","message":"an internal error occurred","request_id":"req_7"}}`))
		}, errdefs.ErrInternal, "internal", "an internal error occurred"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{"GET /api/v1/public/sandboxes/{id}": tt.handler})
			_, err := f.client().GetSandbox(context.Background(), "sbx_1")
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("errors.Is(%v, %v) = false", err, tt.wantIs)
			}
			var apiErr *APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("%T is not *APIError", err)
			}
			if apiErr.Code != tt.wantCode || apiErr.Message != tt.wantMsg {
				t.Errorf("got code %q message %q, want %q %q", apiErr.Code, apiErr.Message, tt.wantCode, tt.wantMsg)
			}
			if !strings.Contains(err.Error(), tt.wantCode) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Error() = %q lacks code or message", err.Error())
			}
			// A server error names its request, for the server's log.
			if apiErr.Status == 500 && (apiErr.RequestID != "req_7" || !strings.Contains(err.Error(), "req_7")) {
				t.Errorf("request id %q, Error() = %q", apiErr.RequestID, err.Error())
			}
		})
	}
	// A code this SDK does not know still is an APIError, and matches nothing.
	unknown := &APIError{Status: 409, Code: "brand_new", Message: "m"}
	if errors.Is(unknown, errdefs.ErrNotFound) || errors.Unwrap(unknown) != nil {
		t.Errorf("unknown code unwraps to %v", errors.Unwrap(unknown))
	}
}

func TestNewClientFromEnv(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin.key"), []byte("file-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, envKey, dataDir, wantKey string
		wantErr                        error
	}{
		{"env key wins", "env-key", dir, "env-key", nil},
		{"admin.key fallback", "", dir, "file-key", nil},
		{"no key anywhere", "", t.TempDir(), "", errdefs.ErrUnauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("ZEISH_API_KEY", tt.envKey)
			t.Setenv("ZEISH_DATA_DIR", tt.dataDir)
			t.Setenv("ZEISH_API_URL", "")
			c, err := NewClientFromEnv()
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if c.apiKey != tt.wantKey || c.BaseURL() != DefaultAPIURL {
				t.Errorf("key %q url %q", c.apiKey, c.BaseURL())
			}
		})
	}
}

func TestDefaultDataDir(t *testing.T) {
	if os.Geteuid() == 0 {
		if got := DefaultDataDir(); got != "/var/lib/zeish" {
			t.Errorf("root: %q", got)
		}
		return
	}
	t.Setenv("XDG_DATA_HOME", "/x/data")
	if got := DefaultDataDir(); got != "/x/data/zeish" {
		t.Errorf("xdg: %q", got)
	}
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", "/home/u")
	if got := DefaultDataDir(); got != "/home/u/.local/share/zeish" {
		t.Errorf("home: %q", got)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// jsonEqual compares two JSON texts by value; two empty strings are equal.
func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	if a == "" || b == "" {
		return a == b
	}
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("bad JSON %q: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("bad JSON %q: %v", b, err)
	}
	return mustJSON(t, va) == mustJSON(t, vb)
}
