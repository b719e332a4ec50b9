package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/zeish/zeish/api"
)

func TestGitStatusTool(t *testing.T) {
	want := api.GitStatus{Repo: "https://git.example/r.git", Path: "/home/user/workspace", Branch: "pr-7", Head: "abc123",
		Dirty: []api.GitFile{{Path: "a.go", Status: " M"}}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/public/sandboxes/{id}/git", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "sbx_git" {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: "no_git_repo", Message: "sandbox has no git_repo"}})
			return
		}
		json.NewEncoder(w).Encode(want)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	cs := connect(t, srv.URL)
	for _, tt := range []struct {
		id      string
		wantErr bool
	}{{"sbx_git", false}, {"sbx_plain", true}} {
		res, err := cs.CallTool(context.Background(), &sdkmcp.CallToolParams{Name: "git_status", Arguments: map[string]any{"sandbox_id": tt.id}})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError != tt.wantErr {
			t.Fatalf("%s: IsError %v: %+v", tt.id, res.IsError, res.Content)
		}
		if tt.wantErr {
			if text := res.Content[0].(*sdkmcp.TextContent).Text; text[:len("no_git_repo")] != "no_git_repo" {
				t.Fatalf("error text %q", text)
			}
			continue
		}
		var got api.GitStatus
		raw, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(raw, &got)
		if got.Branch != "pr-7" || got.Head != "abc123" || len(got.Dirty) != 1 || got.Dirty[0].Status != " M" {
			t.Fatalf("got %+v", got)
		}
	}
}
