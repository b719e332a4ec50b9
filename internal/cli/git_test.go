package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/zeish/zeish/api"
)

var gitStatus1 = api.GitStatus{Repo: "https://git.example/r.git", Path: "/home/user/workspace", Branch: "feature", Head: "0123abcd",
	Dirty: []api.GitFile{{Path: "README.md", Status: " M"}, {Path: "new.txt", Status: "??"}}}

func TestGitCommand(t *testing.T) {
	f := newFake(t)
	r := zeishctl(t, f.URL, nil, "git", "sbx_1")
	for _, want := range []string{"branch  feature", "head    0123abcd", "[ M]", "README.md", "[??]", "new.txt"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("zeishctl git: code %d stdout %q stderr %q; want %q", r.code, r.stdout, r.stderr, want)
		}
	}
	r = zeishctl(t, f.URL, nil, "sandboxes", "create", "--template", "debian", "--git-repo", "https://git.example/r.git",
		"--pr-number", "7", "--git-path", "/srv/w", "--git-pr-ref", "refs/merge-requests/{n}/head", "--git-token-secret", "GL",
		"--secret", "GL=t")
	if r.code != 0 {
		t.Fatalf("create: %d %s", r.code, r.stderr)
	}
	f.mu.Lock()
	got, _ := json.Marshal(f.lastCreate)
	f.mu.Unlock()
	for _, want := range []string{`"git_repo":"https://git.example/r.git"`, `"pr_number":7`, `"git_path":"/srv/w"`,
		`"git_pr_ref":"refs/merge-requests/{n}/head"`, `"git_token_secret":"GL"`} {
		if !strings.Contains(string(got), want) {
			t.Errorf("create body %s lacks %s", got, want)
		}
	}
}
