package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// gitLab is a git forge in the test's NetLab: one repository served over
// smart HTTP (git http-backend, as CGI) at two URLs, public and
// token-protected, with branches main and feature and pull request 7's ref.
type gitLab struct {
	public, private string // clone URLs
	token           string // the private URL's password
	sha             map[string]string
	authOK          atomic.Int32 // requests the private URL let in
	authBad         atomic.Int32 // requests with a wrong password
}

const gitLabHost = testenv.LabHostC + ":8080"

func newGitLab(t *testing.T, lab *testenv.NetLab) *gitLab {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		testskip.Skip(t, "git not installed")
	}
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "srv", "repo.git")
	g := &gitLab{
		public: "http://" + gitLabHost + "/public/repo.git", private: "http://" + gitLabHost + "/private/repo.git",
		token: "zt-" + rand.Text(), sha: map[string]string{},
	}
	sh := func(script string) string {
		t.Helper()
		cmd := exec.Command("sh", "-ec", script)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=lab", "GIT_AUTHOR_EMAIL=lab@test", "GIT_COMMITTER_NAME=lab",
			"GIT_COMMITTER_EMAIL=lab@test", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	os.MkdirAll(work, 0o755)
	sh(`git init -q -b main . && echo main > which.txt && echo base > base.txt && git add . && git commit -qm main`)
	g.sha["main"] = sh(`git rev-parse HEAD`)
	sh(`git switch -qc feature && echo feature > which.txt && git commit -qam feature`)
	g.sha["feature"] = sh(`git rev-parse HEAD`)
	sh(`git switch -q --detach main && echo pr7 > which.txt && git commit -qam "pull request 7"`)
	g.sha["pr7"] = sh(`git rev-parse HEAD`)
	sh(`git init -q --bare ` + bare + ` && git push -q ` + bare + ` main feature HEAD:refs/pull/7/head && git -C ` + bare + ` symbolic-ref HEAD refs/heads/main`)

	backend := &cgi.Handler{Path: gitBin, Args: []string{"http-backend"}, Root: "/", Stderr: io.Discard,
		Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(bare), "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + dir}}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(sandbox.GitDefaultUsername+":"+g.token))
	ln, err := lab.ListenIn(lab.Inet, "tcp", gitLabHost)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rest string
		var private bool
		switch p := r.URL.Path; {
		case strings.HasPrefix(p, "/private/"):
			rest, private = strings.TrimPrefix(p, "/private/"), true
		case strings.HasPrefix(p, "/public/"):
			rest = strings.TrimPrefix(p, "/public/")
		default:
			http.NotFound(w, r)
			return
		}
		if private {
			switch got := r.Header.Get("Authorization"); {
			case got == want:
				g.authOK.Add(1)
			case got != "":
				g.authBad.Add(1)
				fallthrough
			default:
				w.Header().Set("WWW-Authenticate", `Basic realm="lab"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + rest
		backend.ServeHTTP(w, r2)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return g
}

// gitExec runs argv in the sandbox as user (the clone's owner).
func gitExec(t *testing.T, conn *zeish.SandboxConn, user string, argv ...string) (string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	res, err := conn.Exec(ctxFor(t, 3*time.Minute), api.ExecRequest{Argv: argv, User: user}, &out, &errOut)
	if err != nil {
		t.Fatalf("exec %v: %v", argv, err)
	}
	return strings.TrimSpace(out.String() + errOut.String()), res.ExitCode
}

func mustGit(t *testing.T, conn *zeish.SandboxConn, args ...string) string {
	t.Helper()
	out, code := gitExec(t, conn, "user", append([]string{"git", "-C", sandbox.DefaultGitPath}, args...)...)
	if code != 0 {
		t.Fatalf("git %v: exit %d: %s", args, code, out)
	}
	return out
}

// TestGit proves git on real guests against a forge in the test's own
// network: create with a branch, with a pull request, with a token-protected
// repository (the token nowhere but in the agent's memory), a failed clone,
// forks to a new branch and to a pull request that leave the parent alone,
// the status endpoint, and refusals of bad input that change nothing.
func TestGit(t *testing.T) {
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		testskip.Skip(t, "mmdebstrap not installed (scripts/deps.sh)")
	}
	testenv.RequireQEMU(t)
	testenv.DebianTemplate(t) // from the shared cache
	s, lab := startLabServer(t, "ZEISH_DEBIAN_TEMPLATE=on")
	g := newGitLab(t, lab)
	ctx := ctxFor(t, 30*time.Minute)
	c := s.client
	create := func(t *testing.T, req api.CreateSandboxRequest) (zeish.Sandbox, error) {
		t.Helper()
		req.Template, req.MemoryMiB = "debian", 512
		start := time.Now()
		sb, err := c.CreateSandbox(ctx, req, zeish.Wait())
		t.Logf("create %s (git_repo %q branch %q pr %d): %d ms", req.Name, req.GitRepo, req.GitBranch, req.PRNumber, time.Since(start).Milliseconds())
		return sb, err
	}
	remove := func(id string) { c.DeleteSandbox(ctx, id, zeish.Wait()) }

	t.Run("bad input changes nothing", func(t *testing.T) {
		cases := []struct{ body, code string }{
			{`{"template":"debian","git_repo":"ssh://host/r.git"}`, "invalid_git_repo"},
			{`{"template":"debian","git_repo":"file:///etc"}`, "invalid_git_repo"},
			{`{"template":"debian","git_repo":"git@github.com:a/b.git"}`, "invalid_git_repo"},
			{`{"template":"debian","git_repo":"http://bob:hunter2@` + gitLabHost + `/private/repo.git"}`, "git_credentials_in_url"},
			{`{"template":"debian","git_repo":"` + g.public + `","pr_number":-1}`, "invalid_git_ref"},
			{`{"template":"debian","git_repo":"` + g.public + `","pr_number":7,"git_branch":"main"}`, "git_ref_conflict"},
			{`{"template":"debian","git_repo":"` + g.public + `","git_branch":"--upload-pack=touch /tmp/x"}`, "invalid_git_ref"},
			{`{"template":"debian","git_repo":"` + g.public + `","git_pr_ref":"refs/pull/head"}`, "invalid_git_ref"},
			{`{"template":"debian","git_repo":"` + g.public + `","git_path":"relative"}`, "invalid_argument"},
			{`{"template":"debian","git_repo":"` + g.public + `","git_token_secret":"NOPE"}`, "invalid_argument"},
			{`{"template":"debian","git_branch":"main"}`, "no_git_repo"},
			{`{"template":"base","git_repo":"` + g.public + `"}`, "template_lacks_git"},
		}
		for _, tc := range cases {
			st, _, resp := s.raw(t, "POST", api.BasePath+"/public/sandboxes", s.key, tc.body)
			if st != 400 || errorCode(resp) != tc.code {
				t.Errorf("create %s: %d %s, want 400 %s", tc.body, st, resp, tc.code)
			}
			if strings.Contains(string(resp), "hunter2") {
				t.Errorf("create %s: the refusal repeats the password: %s", tc.body, resp)
			}
		}
		if list, _ := c.ListSandboxes(ctx, zeish.ListOptions{}); len(list) != 0 {
			t.Fatalf("a refused create left sandboxes: %+v", list)
		}
	})

	var onFeature zeish.Sandbox
	t.Run("clone a branch", func(t *testing.T) {
		sb, err := create(t, api.CreateSandboxRequest{Name: "git-feature", GitRepo: g.public, GitBranch: "feature"})
		if err != nil || sb.State != sandbox.StateRunning {
			t.Fatalf("create: %+v %v", sb, err)
		}
		onFeature = sb
		if sb.GitPath != sandbox.DefaultGitPath || sb.GitBranch != "feature" || sb.GitPRRef != sandbox.DefaultGitPRRef {
			t.Fatalf("git fields: %+v", sb)
		}
		conn := connect(t, c, sb.ID)
		if got := mustGit(t, conn, "rev-parse", "--abbrev-ref", "HEAD"); got != "feature" {
			t.Fatalf("branch %q", got)
		}
		if out, _ := gitExec(t, conn, "root", "stat", "-c", "%U:%G", sandbox.DefaultGitPath, sandbox.DefaultGitPath+"/which.txt"); out != "user:user\nuser:user" {
			t.Fatalf("owners %q, want user:user", out)
		}
		st, err := c.GitStatus(ctx, sb.ID)
		if err != nil || st.Branch != "feature" || st.Head != g.sha["feature"] || len(st.Dirty) != 0 || st.Repo != g.public || st.Path != sandbox.DefaultGitPath {
			t.Fatalf("status: %+v %v, want feature at %s, clean", st, err, g.sha["feature"])
		}
		// Dirty files, as an agent's edits leave them.
		if out, code := gitExec(t, conn, "user", "sh", "-c", "cd "+sandbox.DefaultGitPath+
			" && echo edited >> which.txt && echo new > fresh.txt && mkdir -p d && echo x > d/staged.txt && git add d/staged.txt && rm base.txt"); code != 0 {
			t.Fatalf("edit: %s", out)
		}
		st, err = c.GitStatus(ctx, sb.ID)
		want := map[string]string{"which.txt": " M", "fresh.txt": "??", "d/staged.txt": "A ", "base.txt": " D"}
		got := map[string]string{}
		for _, f := range st.Dirty {
			got[f.Path] = f.Status
		}
		if err != nil || len(got) != len(want) || st.Branch != "feature" {
			t.Fatalf("dirty: %+v %v, want %v", st, err, want)
		}
		for p, s := range want {
			if got[p] != s {
				t.Fatalf("dirty %s: %q, want %q (%+v)", p, got[p], s, st.Dirty)
			}
		}
		mustGit(t, conn, "checkout", "--", ".")
		mustGit(t, conn, "reset", "-q", "--hard")
		mustGit(t, conn, "clean", "-qfd")
	})

	t.Run("a fork checks out a new branch, the parent stays", func(t *testing.T) {
		if onFeature.ID == "" {
			t.Fatal("needs the branch sandbox")
		}
		start := time.Now()
		resp, err := c.CloneSandbox(ctx, onFeature.ID, api.CloneRequest{Name: "git-try", GitBranch: ptr("agent/try")}, zeish.Wait())
		t.Logf("fork to a new branch: %d ms (parent paused %d ms)", time.Since(start).Milliseconds(), resp.PauseMS)
		if err != nil || len(resp.Sandboxes) != 1 || resp.Sandboxes[0].State != sandbox.StateRunning {
			t.Fatalf("fork: %+v %v", resp, err)
		}
		kid := resp.Sandboxes[0]
		defer remove(kid.ID)
		if kid.GitBranch != "agent/try" || kid.GitRepo != g.public || kid.GitPath != sandbox.DefaultGitPath {
			t.Fatalf("child git fields: %+v", kid)
		}
		kconn, pconn := connect(t, c, kid.ID), connect(t, c, onFeature.ID)
		if got := mustGit(t, kconn, "rev-parse", "--abbrev-ref", "HEAD"); got != "agent/try" {
			t.Fatalf("child on %q", got)
		}
		if got := mustGit(t, kconn, "rev-parse", "HEAD"); got != g.sha["feature"] {
			t.Fatalf("the new branch starts at %s, want the parent's HEAD %s", got, g.sha["feature"])
		}
		gitExec(t, kconn, "user", "sh", "-c", "echo child > "+sandbox.DefaultGitPath+"/child.txt")
		mustGit(t, kconn, "add", "child.txt")
		mustGit(t, kconn, "-c", "user.name=agent", "-c", "user.email=agent@test", "commit", "-qm", "work in the child")
		st, err := c.GitStatus(ctx, kid.ID)
		if err != nil || st.Branch != "agent/try" || st.Head == g.sha["feature"] || len(st.Dirty) != 0 {
			t.Fatalf("child status after commit: %+v %v", st, err)
		}
		pst, err := c.GitStatus(ctx, onFeature.ID)
		if err != nil || pst.Branch != "feature" || pst.Head != g.sha["feature"] {
			t.Fatalf("the parent moved: %+v %v", pst, err)
		}
		if out, code := gitExec(t, pconn, "user", "git", "-C", sandbox.DefaultGitPath, "rev-parse", "--verify", "--quiet", "refs/heads/agent/try"); code == 0 {
			t.Fatalf("the parent has the child's branch: %s", out)
		}
		if p, err := c.GetSandbox(ctx, onFeature.ID); err != nil || p.GitBranch != "feature" {
			t.Fatalf("parent record: %+v %v", p, err)
		}

		// Bad clone requests: 400 with a code, no child made.
		before, _ := c.ListSandboxes(ctx, zeish.ListOptions{})
		for _, tc := range []struct{ body, code string }{
			{`{"pr_number":0}`, "invalid_git_ref"},
			{`{"pr_number":-2}`, "invalid_git_ref"},
			{`{"git_branch":""}`, "invalid_git_ref"},
			{`{"git_branch":"a..b"}`, "invalid_git_ref"},
			{`{"pr_number":7,"git_branch":"main"}`, "git_ref_conflict"},
		} {
			st, _, body := s.raw(t, "POST", api.BasePath+"/public/sandboxes/"+onFeature.ID+"/clone", s.key, tc.body)
			if st != 400 || errorCode(body) != tc.code {
				t.Errorf("clone %s: %d %s, want 400 %s", tc.body, st, body, tc.code)
			}
		}
		if after, _ := c.ListSandboxes(ctx, zeish.ListOptions{}); len(after) != len(before) {
			t.Fatalf("refused clones made sandboxes: %d before, %d after", len(before), len(after))
		}
	})

	t.Run("a fork checks out a pull request", func(t *testing.T) {
		if onFeature.ID == "" {
			t.Fatal("needs the branch sandbox")
		}
		start := time.Now()
		resp, err := c.CloneSandbox(ctx, onFeature.ID, api.CloneRequest{Name: "git-pr", PRNumber: ptr(7)}, zeish.Wait())
		t.Logf("fork to a pull request: %d ms", time.Since(start).Milliseconds())
		if err != nil || len(resp.Sandboxes) != 1 || resp.Sandboxes[0].State != sandbox.StateRunning {
			t.Fatalf("fork: %+v %v", resp, err)
		}
		kid := resp.Sandboxes[0]
		defer remove(kid.ID)
		st, err := c.GitStatus(ctx, kid.ID)
		if err != nil || kid.GitBranch != "pr-7" || kid.PRNumber != 7 || st.Branch != "pr-7" || st.Head != g.sha["pr7"] {
			t.Fatalf("child %+v status %+v %v, want pr-7 at %s", kid, st, err, g.sha["pr7"])
		}
		if pst, err := c.GitStatus(ctx, onFeature.ID); err != nil || pst.Branch != "feature" {
			t.Fatalf("the parent moved: %+v %v", pst, err)
		}
	})
	if onFeature.ID != "" {
		remove(onFeature.ID)
	}

	t.Run("clone a pull request", func(t *testing.T) {
		sb, err := create(t, api.CreateSandboxRequest{Name: "git-pr7", GitRepo: g.public, PRNumber: 7})
		if err != nil || sb.State != sandbox.StateRunning {
			t.Fatalf("create: %+v %v", sb, err)
		}
		defer remove(sb.ID)
		st, err := c.GitStatus(ctx, sb.ID)
		if err != nil || sb.GitBranch != "pr-7" || st.Branch != "pr-7" || st.Head != g.sha["pr7"] {
			t.Fatalf("sandbox %+v status %+v %v, want pr-7 at %s", sb, st, err, g.sha["pr7"])
		}
	})

	t.Run("a token-protected repository, the token nowhere", func(t *testing.T) {
		st, _, created := s.raw(t, "POST", api.BasePath+"/public/sandboxes?wait=true", s.key,
			`{"name":"git-private","template":"debian","memory_mib":512,"git_repo":"`+g.private+`","secrets":{"GIT_TOKEN":"`+g.token+`"}}`)
		var sb zeish.Sandbox
		if err := json.Unmarshal(created, &sb); st != 200 || err != nil || sb.State != sandbox.StateRunning {
			t.Fatalf("create: %d %s", st, created)
		}
		defer remove(sb.ID)
		if g.authOK.Load() == 0 {
			t.Fatal("the forge never saw the token: the clone was not authenticated")
		}
		conn := connect(t, c, sb.ID)
		if got := mustGit(t, conn, "rev-parse", "HEAD"); got != g.sha["main"] {
			t.Fatalf("HEAD %s, want main %s", got, g.sha["main"])
		}
		// Later fetches authenticate the same way (the helper is in the
		// clone's config), and only the clone's user gets an answer.
		seen := g.authOK.Load()
		mustGit(t, conn, "fetch", "-q", "origin")
		if g.authOK.Load() == seen {
			t.Fatal("a later fetch did not authenticate")
		}
		if got := mustGit(t, conn, "config", "--get-all", "credential.helper"); !strings.Contains(got, "/.zeish/sandboxd git-credential") {
			t.Fatalf("credential.helper %q", got)
		}
		ask := "printf 'protocol=http\\nhost=" + gitLabHost + "\\n\\n' | /.zeish/sandboxd git-credential get"
		if out, _ := gitExec(t, conn, "user", "sh", "-c", ask); !strings.Contains(out, "password=") {
			t.Fatalf("the clone's user got no answer: %q", out)
		}
		if out, _ := gitExec(t, conn, "nobody", "sh", "-c", ask); strings.Contains(out, "password") {
			t.Fatalf("another user got the credential: %q", out)
		}
		other := "printf 'protocol=http\\nhost=198.18.5.5\\n\\n' | /.zeish/sandboxd git-credential get"
		if out, _ := gitExec(t, conn, "user", "sh", "-c", other); strings.Contains(out, "password") {
			t.Fatalf("another host got the credential: %q", out)
		}
		// Nowhere on the guest's disk where it could land: homes, git's config.
		if out, code := gitExec(t, conn, "root", "grep", "-rlF", "-D", "skip", "--", g.token, "/home/user", "/root"); code != 1 || out != "" {
			t.Fatalf("the token is in guest files (grep exit %d): %s", code, out)
		}
		// Nowhere in the API's answers.
		var texts []string
		texts = append(texts, string(created))
		for _, path := range []string{"/public/sandboxes/" + sb.ID, "/public/sandboxes", "/public/sandboxes/" + sb.ID + "/git"} {
			_, _, body := s.raw(t, "GET", api.BasePath+path, s.key, "")
			texts = append(texts, string(body))
		}
		texts = append(texts, s.logText())
		for i, txt := range texts {
			if strings.Contains(txt, g.token) {
				t.Fatalf("the token is in API answer or log #%d", i)
			}
		}
		// Nowhere in zeishd's files: the database, console logs, VM folders.
		out, err := exec.Command("grep", "-rlF", "-D", "skip", "--", g.token, s.dataDir).Output()
		if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 || len(out) > 0 {
			t.Fatalf("the token is in zeishd's data dir (grep: %v): %s", err, out)
		}
	})

	t.Run("failed clones: error, git_clone_failed, redacted", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			req  api.CreateSandboxRequest
			want string
		}{
			{"no such repository", api.CreateSandboxRequest{Name: "git-nope", GitRepo: "http://" + gitLabHost + "/public/nope.git"}, "not found"},
			{"no such branch", api.CreateSandboxRequest{Name: "git-nobranch", GitRepo: g.public, GitBranch: "missing"}, "missing"},
			{"a wrong token", api.CreateSandboxRequest{Name: "git-badtoken", GitRepo: g.private,
				Secrets: map[string]string{"GIT_TOKEN": "wrong-" + g.token}}, "Authentication failed"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := create(t, tc.req)
				var sbErr *zeish.SandboxError
				if !errors.As(err, &sbErr) {
					t.Fatalf("create: %v, want a sandbox in error", err)
				}
				sb := sbErr.Sandbox
				defer remove(sb.ID)
				if sb.State != sandbox.StateError || sb.ErrorCode != sandbox.ErrGitCloneFailed || !strings.Contains(sb.ErrorMessage, tc.want) {
					t.Fatalf("sandbox %s %s: %q, want git_clone_failed with %q", sb.State, sb.ErrorCode, sb.ErrorMessage, tc.want)
				}
				if strings.Contains(sb.ErrorMessage, g.token) || strings.Contains(sb.StateReason, g.token) {
					t.Fatalf("the token is in the error: %q", sb.ErrorMessage)
				}
				t.Logf("error_message: %s", sb.ErrorMessage)
			})
		}
		if g.authBad.Load() == 0 {
			t.Error("the wrong token never reached the forge")
		}
		if strings.Contains(s.logText(), g.token) {
			t.Fatal("the token is in zeishd's log")
		}
	})

	t.Run("status of a sandbox without git", func(t *testing.T) {
		sb, err := create(t, api.CreateSandboxRequest{Name: "git-none"})
		if err != nil {
			t.Fatal(err)
		}
		defer remove(sb.ID)
		if _, err := c.GitStatus(ctx, sb.ID); !errors.Is(err, errdefs.ErrNoGitRepo) {
			t.Fatalf("status: %v, want no_git_repo", err)
		}
		if _, err := c.CloneSandbox(ctx, sb.ID, api.CloneRequest{GitBranch: ptr("x")}); !errors.Is(err, errdefs.ErrNoGitRepo) {
			t.Fatalf("fork with a branch: %v, want no_git_repo", err)
		}
	})
}
