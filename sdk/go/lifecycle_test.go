package zeish

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
)

var (
	child1 = Sandbox{ID: "sbx_2", Name: "calm-heron-7", State: sandbox.StateStarting, ParentID: "sbx_1"}
	snp1   = Snapshot{ID: "snp_1", SandboxID: "sbx_1", Name: "before-tests", SizeBytes: 1 << 20, IncludeRAM: true,
		CreatedAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
)

func TestLifecycleSnapshotRequests(t *testing.T) {
	lineage := Lineage{
		Sandbox:     LineageEntry{ID: "sbx_1", Name: "a", State: sandbox.StateRunning, ParentID: "sbx_0"},
		Ancestors:   []LineageEntry{{ID: "sbx_0", Name: "root", State: sandbox.StateStopped}},
		Descendants: []LineageEntry{{ID: "sbx_2", Name: "b", State: sandbox.StateRunning, ParentID: "sbx_1"}},
	}
	tests := []struct {
		name      string
		call      func(ctx context.Context, c *Client) (any, error)
		route     string
		status    int
		resp      any
		wantQuery string
		wantBody  string // JSON, compared semantically; "" for no body
		want      any
	}{
		{
			name:   "pause",
			call:   func(ctx context.Context, c *Client) (any, error) { return c.PauseSandbox(ctx, "sbx_1") },
			route:  "POST /api/v1/public/sandboxes/sbx_1/pause",
			status: http.StatusAccepted,
			resp:   sbx1,
			want:   sbx1,
		},
		{
			name:      "resume and wait",
			call:      func(ctx context.Context, c *Client) (any, error) { return c.ResumeSandbox(ctx, "sbx_1", Wait()) },
			route:     "POST /api/v1/public/sandboxes/sbx_1/resume",
			resp:      sbx1,
			wantQuery: "wait=true",
			want:      sbx1,
		},
		{
			name:   "stop",
			call:   func(ctx context.Context, c *Client) (any, error) { return c.StopSandbox(ctx, "sbx_1") },
			route:  "POST /api/v1/public/sandboxes/sbx_1/stop",
			status: http.StatusAccepted,
			resp:   sbx1,
			want:   sbx1,
		},
		{
			name:      "start and wait",
			call:      func(ctx context.Context, c *Client) (any, error) { return c.StartSandbox(ctx, "sbx_1", Wait()) },
			route:     "POST /api/v1/public/sandboxes/sbx_1/start",
			resp:      sbx1,
			wantQuery: "wait=true",
			want:      sbx1,
		},
		{
			name: "id is escaped",
			call: func(ctx context.Context, c *Client) (any, error) { return c.StopSandbox(ctx, "a/b") },
			// The mux sees the escaped path decoded; what matters is that it
			// stayed one segment, which the route below proves.
			route: "POST /api/v1/public/sandboxes/{id}/stop",
			resp:  sbx1,
			want:  sbx1,
		},
		{
			name: "clone sends only what is set",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.CloneSandbox(ctx, "sbx_1", CloneRequest{Count: 2, GitBranch: new("fix"), Browser: new(false)}, Wait())
			},
			route:     "POST /api/v1/public/sandboxes/sbx_1/clone",
			resp:      CloneResponse{PauseMS: 41, Sandboxes: []Sandbox{child1}},
			wantQuery: "wait=true",
			wantBody:  `{"count":2,"git_branch":"fix","browser":false}`,
			want:      CloneResponse{PauseMS: 41, Sandboxes: []Sandbox{child1}},
		},
		{
			name:     "lineage",
			call:     func(ctx context.Context, c *Client) (any, error) { return c.Lineage(ctx, "sbx_1") },
			route:    "GET /api/v1/public/sandboxes/sbx_1/lineage",
			resp:     lineage,
			wantBody: "",
			want:     lineage,
		},
		{
			name: "create snapshot",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.CreateSnapshot(ctx, "sbx_1", CreateSnapshotRequest{Name: "before-tests"})
			},
			route:    "POST /api/v1/public/sandboxes/sbx_1/snapshots",
			status:   http.StatusCreated,
			resp:     snp1,
			wantBody: `{"name":"before-tests"}`,
			want:     snp1,
		},
		{
			name: "create snapshot with defaults sends an empty object",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.CreateSnapshot(ctx, "sbx_1", CreateSnapshotRequest{})
			},
			route:    "POST /api/v1/public/sandboxes/sbx_1/snapshots",
			status:   http.StatusCreated,
			resp:     snp1,
			wantBody: `{}`,
			want:     snp1,
		},
		{
			name:  "list snapshots",
			call:  func(ctx context.Context, c *Client) (any, error) { return c.ListSnapshots(ctx, "sbx_1") },
			route: "GET /api/v1/public/sandboxes/sbx_1/snapshots",
			resp:  api.SnapshotList{Snapshots: []Snapshot{snp1}},
			want:  []Snapshot{snp1},
		},
		{
			name:  "get snapshot",
			call:  func(ctx context.Context, c *Client) (any, error) { return c.GetSnapshot(ctx, "snp_1") },
			route: "GET /api/v1/public/snapshots/snp_1",
			resp:  snp1,
			want:  snp1,
		},
		{
			name: "delete snapshot",
			call: func(ctx context.Context, c *Client) (any, error) {
				return "deleted", c.DeleteSnapshot(ctx, "snp_1")
			},
			route:  "DELETE /api/v1/public/snapshots/snp_1",
			status: http.StatusNoContent,
			want:   "deleted",
		},
		{
			name:      "restore and wait",
			call:      func(ctx context.Context, c *Client) (any, error) { return c.RestoreSnapshot(ctx, "snp_1", Wait()) },
			route:     "POST /api/v1/public/snapshots/snp_1/restore",
			resp:      RestoreResponse{Snapshot: snp1, Sandbox: sbx1},
			wantQuery: "wait=true",
			want:      RestoreResponse{Snapshot: snp1, Sandbox: sbx1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := tt.status
			if status == 0 {
				status = http.StatusOK
			}
			handler := reply(status, tt.resp)
			if status == http.StatusNoContent {
				handler = func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }
			}
			f := newFake(t, map[string]http.HandlerFunc{tt.route: handler})
			got, err := tt.call(context.Background(), f.client())
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			rec := f.last()
			method, path, _ := strings.Cut(tt.route, " ")
			if rec.Method != method || (!strings.Contains(path, "{") && rec.Path != path) {
				t.Errorf("request %s %s, want %s", rec.Method, rec.Path, tt.route)
			}
			if rec.RawQuery != tt.wantQuery {
				t.Errorf("query %q, want %q", rec.RawQuery, tt.wantQuery)
			}
			if rec.Auth != "Bearer key-1" {
				t.Errorf("auth %q", rec.Auth)
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

// A nil pointer in CloneRequest means "keep the parent's value" and must not
// reach the wire as null or a zero; a pointer to a zero value must.
func TestCloneRequestOmitsNilPointers(t *testing.T) {
	tests := []struct {
		name string
		req  CloneRequest
		want string
	}{
		{"empty", CloneRequest{}, `{}`},
		{"name and count", CloneRequest{Name: "w", Count: 3}, `{"name":"w","count":3}`},
		{"zero values are sent when set", CloneRequest{GitBranch: new(""), PRNumber: new(0), MaxCostMicros: new(int64(0)), Browser: new(false), Desktop: new(false)},
			`{"git_branch":"","pr_number":0,"max_cost_micros":0,"browser":false,"desktop":false}`},
		{"every field", CloneRequest{Name: "w", Count: 2, GitBranch: new("b"), PRNumber: new(7), MaxCostMicros: new(int64(5000)), Browser: new(true), Desktop: new(true)},
			`{"name":"w","count":2,"git_branch":"b","pr_number":7,"max_cost_micros":5000,"browser":true,"desktop":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{
				"POST /api/v1/public/sandboxes/{id}/clone": reply(http.StatusAccepted, CloneResponse{}),
			})
			if _, err := f.client().CloneSandbox(context.Background(), "sbx_1", tt.req); err != nil {
				t.Fatal(err)
			}
			if got := f.last().Body; !jsonEqual(t, got, tt.want) {
				t.Errorf("body %s, want %s", got, tt.want)
			}
		})
	}
}

func TestCloneErrorsUnwrap(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{
		"POST /api/v1/public/sandboxes/{id}/clone": replyError(http.StatusConflict, "node_full", "host has 100 MiB free"),
	})
	_, err := f.client().CloneSandbox(context.Background(), "sbx_1", CloneRequest{})
	if !errors.Is(err, errdefs.ErrNodeFull) {
		t.Errorf("err %v, want node_full", err)
	}
}

func TestWaitForState(t *testing.T) {
	timeout := api.ErrorBody{Error: api.ErrorDetail{Code: "timeout", Message: "sandbox sbx_1 is still starting"}}
	stopped := sbx1
	stopped.State = sandbox.StateStopped
	failed := sbx1
	failed.State, failed.StateReason = sandbox.StateError, "boot failed"
	type answer struct {
		status int
		body   any
	}
	tests := []struct {
		name      string
		want      State
		answers   []answer // one per POST …/wait, in order
		wantState State
		wantErr   error
		wantCalls int
	}{
		{"reached at once", sandbox.StateRunning, []answer{{200, sbx1}}, sandbox.StateRunning, nil, 1},
		{"server timeouts are waited out", sandbox.StateStopped, []answer{{504, timeout}, {504, timeout}, {200, stopped}}, sandbox.StateStopped, nil, 3},
		{"error state ends the wait", sandbox.StateRunning, []answer{{200, failed}}, sandbox.StateError, errdefs.ErrInvalidState, 1},
		{"other errors end the wait", sandbox.StateRunning, []answer{{404, api.ErrorBody{Error: api.ErrorDetail{Code: "not_found", Message: "no"}}}}, "", errdefs.ErrNotFound, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			n := 0
			f := newFake(t, map[string]http.HandlerFunc{
				"POST /api/v1/public/sandboxes/{id}/wait": func(w http.ResponseWriter, _ *http.Request) {
					mu.Lock()
					a := tt.answers[min(n, len(tt.answers)-1)]
					n++
					mu.Unlock()
					writeJSON(w, a.status, a.body)
				},
			})
			sb, err := f.client().WaitForState(context.Background(), "sbx_1", tt.want)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if sb.State != tt.wantState {
				t.Errorf("state %q, want %q", sb.State, tt.wantState)
			}
			reqs := f.all()
			if len(reqs) != tt.wantCalls {
				t.Errorf("%d wait calls, want %d", len(reqs), tt.wantCalls)
			}
			want := `{"state":"` + string(tt.want) + `","timeout_seconds":600}`
			if !jsonEqual(t, reqs[0].Body, want) {
				t.Errorf("body %s, want %s", reqs[0].Body, want)
			}
		})
	}
	if _, err := NewClient("http://127.0.0.1:1", "k").WaitForState(context.Background(), "sbx_1", ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("empty state: %v", err)
	}
}
