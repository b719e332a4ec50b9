package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/zeish/zeish/errdefs"
)

func TestCheckGitRepo(t *testing.T) {
	cases := []struct {
		url  string
		want *errdefs.Error // nil: accepted
	}{
		{"https://github.com/zeish/zeish.git", nil},
		{"http://198.18.0.1:8080/repo.git", nil},
		{"git://git.example/r", nil},
		{"https://host/r?x=1", nil},
		{"", errdefs.ErrInvalidGitRepo},
		{"ssh://git@github.com/a/b", errdefs.ErrGitCredentials},
		{"ssh://github.com/a/b", errdefs.ErrInvalidGitRepo},
		{"git@github.com:a/b.git", errdefs.ErrInvalidGitRepo},
		{"file:///etc", errdefs.ErrInvalidGitRepo},
		{"/srv/repo", errdefs.ErrInvalidGitRepo},
		{"ext::sh -c touch% /tmp/x", errdefs.ErrInvalidGitRepo},
		{"https://user:pass@github.com/a/b", errdefs.ErrGitCredentials},
		{"https://tok@github.com/a/b", errdefs.ErrGitCredentials},
		{"https:///nohost", errdefs.ErrInvalidGitRepo},
		{"https:opaque", errdefs.ErrInvalidGitRepo},
		{"https://host/a b", errdefs.ErrInvalidGitRepo},
		{"https://host/a\nb", errdefs.ErrInvalidGitRepo},
		{"https://host/" + strings.Repeat("a", 1024), errdefs.ErrInvalidGitRepo},
	}
	for _, c := range cases {
		err := CheckGitRepo(c.url)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("CheckGitRepo(%q) = %v, want %v", c.url, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "pass@") {
			t.Errorf("CheckGitRepo(%q): the error repeats the credentials: %v", c.url, err)
		}
	}
}

func TestCheckBranch(t *testing.T) {
	good := []string{"main", "feature/x", "v1.2", "agent/attempt-3", "pr-7", "a_b"}
	bad := []string{"", "-f", "--upload-pack=x", "a..b", "a b", "a~1", "a^", "a:b", "a?", "a*", "a[", `a\b`, "/a", "a/", "a//b",
		"a.", "a.lock", "x/.hidden", "a@{1}", "@", "HEAD", "a\x01", strings.Repeat("b", 257)}
	for _, b := range good {
		if err := CheckBranch(b); err != nil {
			t.Errorf("CheckBranch(%q) = %v", b, err)
		}
	}
	for _, b := range bad {
		if err := CheckBranch(b); !errors.Is(err, errdefs.ErrInvalidGitRef) {
			t.Errorf("CheckBranch(%q) = %v, want invalid_git_ref", b, err)
		}
	}
}

func TestPullRefs(t *testing.T) {
	cases := []struct {
		pattern string
		n       int
		want    string
		ok      bool
	}{
		{"", 7, "refs/pull/7/head", true},
		{DefaultGitPRRef, 12, "refs/pull/12/head", true},
		{"refs/merge-requests/{n}/head", 3, "refs/merge-requests/3/head", true},
		{"refs/pull/head", 1, "", false},
		{"refs/pull/{n}/{n}", 1, "", false},
		{"pull/{n}/head", 1, "", false},
		{"refs/../{n}", 1, "", false},
		{"refs/pull/{n}/head/", 1, "", false},
		{"refs/pull/{x}{n}", 1, "", false},
		{"refs/pull/{n} head", 1, "", false},
	}
	for _, c := range cases {
		if c.pattern != "" {
			if err := CheckPRRef(c.pattern); (err == nil) != c.ok {
				t.Errorf("CheckPRRef(%q) = %v, want ok %v", c.pattern, err, c.ok)
			}
		}
		if c.ok {
			if got := PullRef(c.pattern, c.n); got != c.want {
				t.Errorf("PullRef(%q, %d) = %q, want %q", c.pattern, c.n, got, c.want)
			}
		}
	}
	if PRBranch(7) != "pr-7" {
		t.Errorf("PRBranch(7) = %q", PRBranch(7))
	}
}

func TestResolveGit(t *testing.T) {
	const repo = "https://git.example/r.git"
	cases := []struct {
		name string
		g    GitRequest
		want *errdefs.Error
		// what the sandbox then says, when accepted
		branch, path, ref string
	}{
		{"no git at all", GitRequest{}, nil, "", "", ""},
		{"repo only: defaults", GitRequest{Repo: repo}, nil, "", DefaultGitPath, DefaultGitPRRef},
		{"repo and branch", GitRequest{Repo: repo, Branch: "dev", Path: "/srv/w"}, nil, "dev", "/srv/w", DefaultGitPRRef},
		{"pull request: its branch", GitRequest{Repo: repo, PRNumber: 7}, nil, "pr-7", DefaultGitPath, DefaultGitPRRef},
		{"pull request with its own branch", GitRequest{Repo: repo, PRNumber: 7, Branch: "pr-7"}, nil, "pr-7", DefaultGitPath, DefaultGitPRRef},
		{"pull request and another branch", GitRequest{Repo: repo, PRNumber: 7, Branch: "main"}, errdefs.ErrGitRefConflict, "", "", ""},
		{"negative pull request", GitRequest{Repo: repo, PRNumber: -1}, errdefs.ErrInvalidGitRef, "", "", ""},
		{"bad branch", GitRequest{Repo: repo, Branch: "--force"}, errdefs.ErrInvalidGitRef, "", "", ""},
		{"gitlab ref", GitRequest{Repo: repo, PRNumber: 2, PRRef: "refs/merge-requests/{n}/head"}, nil, "pr-2", DefaultGitPath, "refs/merge-requests/{n}/head"},
		{"bad ref pattern", GitRequest{Repo: repo, PRRef: "refs/pull/x"}, errdefs.ErrInvalidGitRef, "", "", ""},
		{"relative path", GitRequest{Repo: repo, Path: "work"}, errdefs.ErrInvalidArgument, "", "", ""},
		{"root path", GitRequest{Repo: repo, Path: "/"}, errdefs.ErrInvalidArgument, "", "", ""},
		{"unclean path", GitRequest{Repo: repo, Path: "/home/user/../x"}, errdefs.ErrInvalidArgument, "", "", ""},
		{"branch without repo", GitRequest{Branch: "main"}, errdefs.ErrNoGitRepo, "", "", ""},
		{"pr without repo", GitRequest{PRNumber: 3}, errdefs.ErrNoGitRepo, "", "", ""},
		{"token secret present", GitRequest{Repo: repo, TokenSecret: "GH", Secrets: map[string]string{"GH": "t"}}, nil, "", DefaultGitPath, DefaultGitPRRef},
		{"token secret missing", GitRequest{Repo: repo, TokenSecret: "GH"}, errdefs.ErrInvalidArgument, "", "", ""},
		{"credentials in the URL", GitRequest{Repo: "https://a:b@git.example/r"}, errdefs.ErrGitCredentials, "", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sb Sandbox
			err := ResolveGit(&sb, c.g)
			if c.want != nil {
				if !errors.Is(err, c.want) {
					t.Fatalf("err %v, want %s", err, c.want.Code)
				}
				if sb.GitRepo != "" || sb.GitBranch != "" {
					t.Fatalf("a refused request changed the sandbox: %+v", sb)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sb.GitBranch != c.branch || sb.GitPath != c.path || sb.GitPRRef != c.ref || sb.GitRepo != c.g.Repo {
				t.Fatalf("sandbox %+v, want branch %q path %q ref %q", sb, c.branch, c.path, c.ref)
			}
		})
	}
}

func TestForkGit(t *testing.T) {
	parent := Sandbox{ID: "sbx_p", GitRepo: "https://git.example/r", GitBranch: "main", GitPRRef: DefaultGitPRRef, GitPath: DefaultGitPath}
	str := func(s string) *string { return &s }
	num := func(n int) *int { return &n }
	cases := []struct {
		name     string
		parent   Sandbox
		o        ForkOverrides
		want     *errdefs.Error
		branch   string // the child's branch after Inherit
		pr       int
		sw       GitSwitch
		switched bool
	}{
		{"nothing passed", parent, ForkOverrides{}, nil, "main", 0, GitSwitch{}, false},
		{"same branch", parent, ForkOverrides{GitBranch: str("main")}, nil, "main", 0, GitSwitch{}, false},
		{"new branch", parent, ForkOverrides{GitBranch: str("try")}, nil, "try", 0, GitSwitch{Branch: "try"}, true},
		{"pull request", parent, ForkOverrides{PRNumber: num(7)}, nil, "pr-7", 7, GitSwitch{Branch: "pr-7", PullRef: "refs/pull/7/head"}, true},
		{"pull request and its branch", parent, ForkOverrides{PRNumber: num(7), GitBranch: str("pr-7")}, nil, "pr-7", 7,
			GitSwitch{Branch: "pr-7", PullRef: "refs/pull/7/head"}, true},
		{"pull request and another branch", parent, ForkOverrides{PRNumber: num(7), GitBranch: str("x")}, errdefs.ErrGitRefConflict, "", 0, GitSwitch{}, false},
		{"zero pull request", parent, ForkOverrides{PRNumber: num(0)}, errdefs.ErrInvalidGitRef, "", 0, GitSwitch{}, false},
		{"negative pull request", parent, ForkOverrides{PRNumber: num(-3)}, errdefs.ErrInvalidGitRef, "", 0, GitSwitch{}, false},
		{"empty branch", parent, ForkOverrides{GitBranch: str("")}, errdefs.ErrInvalidGitRef, "", 0, GitSwitch{}, false},
		{"parent without a repo", Sandbox{ID: "sbx_q"}, ForkOverrides{GitBranch: str("x")}, errdefs.ErrNoGitRepo, "", 0, GitSwitch{}, false},
		{"a repo that was never cloned (made before clones)", Sandbox{ID: "sbx_old", GitRepo: "https://h/r", GitBranch: "main"},
			ForkOverrides{GitBranch: str("x")}, errdefs.ErrNoGitRepo, "", 0, GitSwitch{}, false},
		{"a branch off a pull request keeps its number", Sandbox{GitRepo: "https://h/r", GitBranch: "pr-7", PRNumber: 7, GitPath: "/w"}, ForkOverrides{GitBranch: str("fix")},
			nil, "fix", 7, GitSwitch{Branch: "fix"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, err := ForkGit(c.parent, c.o)
			if c.want != nil {
				if !errors.Is(err, c.want) {
					t.Fatalf("err %v, want %s", err, c.want.Code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var child Sandbox
			Inherit(&child, c.parent, o)
			Keep(&child, c.parent)
			if child.GitBranch != c.branch || child.PRNumber != c.pr {
				t.Fatalf("child on %q pr %d, want %q pr %d", child.GitBranch, child.PRNumber, c.branch, c.pr)
			}
			sw, ok := ForkSwitch(c.parent, child)
			if ok != c.switched || sw != c.sw {
				t.Fatalf("switch %+v %v, want %+v %v", sw, ok, c.sw, c.switched)
			}
		})
	}
}

func TestGitToken(t *testing.T) {
	cases := []struct {
		name       string
		sb         Sandbox
		secrets    map[string]string
		user, pass string
	}{
		{"none", Sandbox{}, nil, "", ""},
		{"GIT_TOKEN by default", Sandbox{}, map[string]string{"GIT_TOKEN": "tok"}, GitDefaultUsername, "tok"},
		{"named secret", Sandbox{GitTokenSecret: "GH"}, map[string]string{"GH": "t2", "GIT_TOKEN": "other"}, GitDefaultUsername, "t2"},
		{"user name secret", Sandbox{}, map[string]string{"GIT_TOKEN": "tok", "GIT_USERNAME": "bob"}, "bob", "tok"},
	}
	for _, c := range cases {
		if u, p := GitToken(c.sb, c.secrets); u != c.user || p != c.pass {
			t.Errorf("%s: %q %q, want %q %q", c.name, u, p, c.user, c.pass)
		}
	}
}

func TestRedactGit(t *testing.T) {
	cases := []struct {
		in      string
		secrets []string
		want    string
	}{
		{"fatal: repository 'http://h/r' not found", nil, "fatal: repository 'http://h/r' not found"},
		{"fatal: unable to access 'https://bob:hunter22@h/r/': 403", nil, "fatal: unable to access 'https://[REDACTED]@h/r/': 403"},
		{"token ghp_abcdef leaked twice: ghp_abcdef", []string{"ghp_abcdef"}, "token [REDACTED] leaked twice: [REDACTED]"},
		{"short a secret", []string{"a"}, "short a secret"},
		{"", []string{"ghp_abcdef"}, ""},
	}
	for _, c := range cases {
		if got := RedactGit(c.in, c.secrets...); got != c.want {
			t.Errorf("RedactGit(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
