package gitws

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/sandbox"
)

func TestParseStatus(t *testing.T) {
	cases := []struct {
		name string
		out  string
		want api.GitStatus
	}{
		{"clean, on a branch",
			"# branch.oid 0123abcd\x00# branch.head main\x00# branch.upstream origin/main\x00# branch.ab +0 -0\x00",
			api.GitStatus{Branch: "main", Head: "0123abcd", Dirty: []api.GitFile{}}},
		{"changed, staged, renamed, untracked, conflict",
			"# branch.oid 0123abcd\x00# branch.head feature/x\x00" +
				"1 .M N... 100644 100644 100644 aaa bbb README.md\x00" +
				"1 A. N... 000000 100644 100644 000 ccc dir/new file.txt\x00" +
				"2 R. N... 100644 100644 100644 ddd ddd R100 renamed.go\x00old.go\x00" +
				"u UU N... 100644 100644 100644 100644 e1 e2 e3 both.txt\x00" +
				"? untracked.log\x00",
			api.GitStatus{Branch: "feature/x", Head: "0123abcd", Dirty: []api.GitFile{
				{Path: "README.md", Status: " M"}, {Path: "dir/new file.txt", Status: "A "}, {Path: "renamed.go", Status: "R "},
				{Path: "both.txt", Status: "UU"}, {Path: "untracked.log", Status: "??"}}}},
		{"detached", "# branch.oid 0123abcd\x00# branch.head (detached)\x00",
			api.GitStatus{Head: "0123abcd", Detached: true, Dirty: []api.GitFile{}}},
		{"no commit yet", "# branch.oid (initial)\x00# branch.head main\x00",
			api.GitStatus{Branch: "main", Dirty: []api.GitFile{}}},
	}
	for _, c := range cases {
		if got := ParseStatus(c.out); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
	many := "# branch.head main\x00" + strings.Repeat("? f\x00", api.MaxGitDirty+5)
	if got := ParseStatus(many); len(got.Dirty) != api.MaxGitDirty || !got.Truncated {
		t.Errorf("%d dirty, truncated %v", len(got.Dirty), got.Truncated)
	}
}

// fakeGuest records every exec and answers from a table keyed by argv.
type fakeGuest struct {
	calls []string
	// fail maps an argv prefix to the exit code and stderr it gets.
	fail map[string]struct {
		code   int
		stderr string
	}
}

func (f *fakeGuest) Exec(_ context.Context, req guest.ExecRequest, _ io.Reader, _, stderr io.Writer) (guest.ExecResult, error) {
	line := req.User + ": " + strings.Join(req.Argv, " ")
	f.calls = append(f.calls, line)
	for prefix, r := range f.fail {
		if strings.HasPrefix(line, prefix) {
			if r.code == -2 {
				return guest.ExecResult{}, fmt.Errorf("exec git: executable file not found in $PATH: %w", errdefs.ErrFileNotFound)
			}
			io.WriteString(stderr, r.stderr)
			return guest.ExecResult{ExitCode: r.code}, nil
		}
	}
	return guest.ExecResult{}, nil
}

func TestCloneAndSwitch(t *testing.T) {
	sb := sandbox.Sandbox{GitRepo: "http://198.18.0.1/r.git", GitPath: "/home/user/workspace", GitPRRef: sandbox.DefaultGitPRRef}
	const install = "root: install -d -o user -g user -m 0755 -- /home/user/workspace"
	const helper = "-c credential.helper= -c credential.helper=/.zeish/sandboxd git-credential "
	type failure = struct {
		code   int
		stderr string
	}
	cases := []struct {
		name    string
		run     func(*fakeGuest) error
		fail    map[string]failure
		calls   []string
		wantErr string
	}{
		{"clone the default branch", func(g *fakeGuest) error { return Clone(context.Background(), g, sb, false) }, nil,
			[]string{install, "user: git clone --no-progress -- http://198.18.0.1/r.git /home/user/workspace"}, ""},
		{"clone a branch with the helper", func(g *fakeGuest) error {
			s := sb
			s.GitBranch = "dev"
			return Clone(context.Background(), g, s, true, "tok3n")
		}, nil,
			[]string{install, "user: git clone --no-progress " + helper + "--branch dev -- http://198.18.0.1/r.git /home/user/workspace"}, ""},
		{"clone a pull request", func(g *fakeGuest) error {
			s := sb
			s.GitBranch, s.PRNumber = "pr-7", 7
			return Clone(context.Background(), g, s, false)
		}, nil,
			[]string{install, "user: git clone --no-progress -- http://198.18.0.1/r.git /home/user/workspace",
				"user: git -C /home/user/workspace fetch --no-progress origin -- refs/pull/7/head",
				"user: git -C /home/user/workspace switch --no-track -C pr-7 FETCH_HEAD"}, ""},
		{"a failed clone redacts the token", func(g *fakeGuest) error { return Clone(context.Background(), g, sb, true, "tok3n") },
			map[string]failure{"user: git clone": {128, "Cloning into '/home/user/workspace'...\nfatal: Authentication failed for 'http://x:tok3n@198.18.0.1/r.git'\n"}},
			nil, "git clone: fatal: Authentication failed for 'http://[REDACTED]@198.18.0.1/r.git'"},
		{"the exec itself fails for want of git", func(g *fakeGuest) error { return Clone(context.Background(), g, sb, false) },
			map[string]failure{"user: git clone": {-2, ""}}, nil, NoGit.Error()},
		{"no git", func(g *fakeGuest) error { return Clone(context.Background(), g, sb, false) },
			map[string]failure{"user: git clone": {127, "sh: git: not found"}}, nil, NoGit.Error()},
		{"switch to an existing branch", func(g *fakeGuest) error {
			return Switch(context.Background(), g, sb.GitPath, sandbox.GitSwitch{Branch: "dev"})
		}, nil, []string{
			"user: git -C /home/user/workspace show-ref --verify --quiet refs/heads/dev",
			"user: git -C /home/user/workspace switch dev"}, ""},
		{"switch to origin's branch", func(g *fakeGuest) error {
			return Switch(context.Background(), g, sb.GitPath, sandbox.GitSwitch{Branch: "dev"})
		}, map[string]failure{"user: git -C /home/user/workspace show-ref --verify --quiet refs/heads/": {1, ""}}, []string{
			"user: git -C /home/user/workspace show-ref --verify --quiet refs/heads/dev",
			"user: git -C /home/user/workspace show-ref --verify --quiet refs/remotes/origin/dev",
			"user: git -C /home/user/workspace switch dev"}, ""},
		{"a new branch from HEAD", func(g *fakeGuest) error {
			return Switch(context.Background(), g, sb.GitPath, sandbox.GitSwitch{Branch: "try"})
		}, map[string]failure{"user: git -C /home/user/workspace show-ref": {1, ""}}, []string{
			"user: git -C /home/user/workspace show-ref --verify --quiet refs/heads/try",
			"user: git -C /home/user/workspace show-ref --verify --quiet refs/remotes/origin/try",
			"user: git -C /home/user/workspace switch -c try"}, ""},
		{"a pull request in a fork", func(g *fakeGuest) error {
			return Switch(context.Background(), g, sb.GitPath, sandbox.GitSwitch{Branch: "pr-9", PullRef: "refs/pull/9/head"})
		}, nil, []string{
			"user: git -C /home/user/workspace fetch --no-progress origin -- refs/pull/9/head",
			"user: git -C /home/user/workspace switch --no-track -C pr-9 FETCH_HEAD"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := &fakeGuest{fail: c.fail}
			err := c.run(g)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				if strings.Contains(err.Error(), "tok3n") {
					t.Fatalf("the token leaked: %v", err)
				}
				var gerr *Error
				if !errors.As(err, &gerr) && !errors.Is(err, NoGit) {
					t.Fatalf("err %T is neither *Error nor NoGit", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g.calls, c.calls) {
				t.Fatalf("calls\n%s\nwant\n%s", strings.Join(g.calls, "\n"), strings.Join(c.calls, "\n"))
			}
		})
	}
}
