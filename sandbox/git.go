package sandbox

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/zeish/zeish/errdefs"
)

// The rules on a sandbox's git fields (docs/git.md) that need no I/O: which
// repository URLs, branch names and pull refs are accepted, how a pull
// request's local branch is named, and how credentials are kept out of the
// words a failed clone leaves behind.

// Defaults of the git fields.
const (
	// DefaultGitPath is where the repository is cloned (owned by GitUser).
	DefaultGitPath = "/home/user/workspace"
	// DefaultGitPRRef is GitHub's (and Gitea's) pull ref; {n} is the number.
	DefaultGitPRRef = "refs/pull/{n}/head"
	// DefaultGitTokenSecret is the entry of secrets whose value, when
	// present, git uses as its password (a token).
	DefaultGitTokenSecret = "GIT_TOKEN"
	// GitUsernameSecret, when among the secrets, is git's user name;
	// otherwise GitDefaultUsername (which token-based forges ignore).
	GitUsernameSecret  = "GIT_USERNAME"
	GitDefaultUsername = "x-access-token"
	// GitUser is the guest account that owns the clone and runs git.
	GitUser = "user"
)

// ErrGitCloneFailed is the error_code of a sandbox whose repository could
// not be cloned (or, for a fork, its branch or pull ref not checked out).
const ErrGitCloneFailed = "git_clone_failed"

// CheckGitRepo accepts an http, https or git URL with a host and no
// credentials (those come from a secret, never from the URL, which the API
// shows and logs keep).
func CheckGitRepo(raw string) error {
	if raw == "" || len(raw) > 1024 {
		return fmt.Errorf("git_repo must be 1..1024 characters: %w", errdefs.ErrInvalidGitRepo)
	}
	for _, r := range raw {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("git_repo holds a space or control character: %w", errdefs.ErrInvalidGitRepo)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse quotes the URL; it may hold a password.
		return fmt.Errorf("git_repo is not a URL: %w", errdefs.ErrInvalidGitRepo)
	}
	if u.User != nil {
		return fmt.Errorf("git_repo holds a user name or password; pass the token in secrets.%s (or the secret git_token_secret names) instead: %w",
			DefaultGitTokenSecret, errdefs.ErrGitCredentials)
	}
	switch u.Scheme {
	case "http", "https", "git":
	default:
		return fmt.Errorf("git_repo must be an http://, https:// or git:// URL (ssh and local paths are not supported): %w", errdefs.ErrInvalidGitRepo)
	}
	if u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("git_repo has no host: %w", errdefs.ErrInvalidGitRepo)
	}
	return nil
}

// CheckBranch accepts a branch name as git check-ref-format --branch does,
// minus what would read as an option ("-x") or a revision expression.
func CheckBranch(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("git_branch %q is not a valid branch name: %s: %w", name, why, errdefs.ErrInvalidGitRef)
	}
	switch {
	case name == "":
		return bad("empty")
	case len(name) > 256:
		return fmt.Errorf("git_branch is longer than 256 characters: %w", errdefs.ErrInvalidGitRef)
	case name == "@" || name == "HEAD":
		return bad("reserved")
	case strings.HasPrefix(name, "-"):
		return bad("starts with -")
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//"):
		return bad("empty path component")
	case strings.HasSuffix(name, ".") || strings.HasSuffix(name, ".lock"):
		return bad("ends with . or .lock")
	case strings.Contains(name, "..") || strings.Contains(name, "@{"):
		return bad("holds .. or @{")
	case strings.ContainsAny(name, " ~^:?*[\\"):
		return bad("holds a space or one of ~^:?*[\\")
	}
	for _, part := range strings.Split(name, "/") {
		if strings.HasPrefix(part, ".") || strings.HasSuffix(part, ".lock") {
			return bad("a component starts with . or ends with .lock")
		}
	}
	for _, r := range name {
		if r < ' ' || r == 0x7f {
			return bad("holds a control character")
		}
	}
	return nil
}

// prRefPattern is a pull ref pattern: a ref under refs/ holding {n} once.
var prRefPattern = regexp.MustCompile(`^refs/[A-Za-z0-9._/{}-]+$`)

// CheckPRRef accepts a pull ref pattern such as refs/pull/{n}/head
// (GitHub) or refs/merge-requests/{n}/head (GitLab).
func CheckPRRef(pattern string) error {
	if len(pattern) > 256 || !prRefPattern.MatchString(pattern) || strings.Count(pattern, "{n}") != 1 ||
		strings.Count(pattern, "{") != 1 || strings.Contains(pattern, "..") || strings.Contains(pattern, "//") || strings.HasSuffix(pattern, "/") {
		return fmt.Errorf("git_pr_ref %q must be a ref under refs/ holding {n} once, like %s: %w", pattern, DefaultGitPRRef, errdefs.ErrInvalidGitRef)
	}
	return nil
}

// PullRef is pull request n's ref under pattern.
func PullRef(pattern string, n int) string {
	if pattern == "" {
		pattern = DefaultGitPRRef
	}
	return strings.Replace(pattern, "{n}", strconv.Itoa(n), 1)
}

// PRBranch is the local branch a pull request is checked out on.
func PRBranch(n int) string { return "pr-" + strconv.Itoa(n) }

// CheckGitPath accepts an absolute, clean path for the clone, not the root.
func CheckGitPath(p string) error {
	if len(p) > 1024 || !path.IsAbs(p) || path.Clean(p) != p || p == "/" || strings.ContainsAny(p, "\x00\n") {
		return fmt.Errorf("git_path %q must be an absolute, clean path other than /: %w", p, errdefs.ErrInvalidArgument)
	}
	return nil
}

// GitRequest is a create request's git fields.
type GitRequest struct {
	Repo, Branch string
	PRNumber     int
	Path, PRRef  string
	TokenSecret  string
	// Secrets are the request's secrets (the token must be among them when
	// TokenSecret names one).
	Secrets map[string]string
}

// ResolveGit checks a create request's git fields and fills sb's, with
// defaults. The rule for branch and pull request together: the pull
// request is checked out on its local branch pr-N, so git_branch may be
// left out or be exactly pr-N; any other branch conflicts.
func ResolveGit(sb *Sandbox, g GitRequest) error {
	if g.Repo == "" {
		if g.Branch != "" || g.PRNumber != 0 || g.Path != "" || g.PRRef != "" || g.TokenSecret != "" {
			return fmt.Errorf("git_branch, pr_number, git_path, git_pr_ref and git_token_secret need git_repo: %w", errdefs.ErrNoGitRepo)
		}
		return nil
	}
	if err := CheckGitRepo(g.Repo); err != nil {
		return err
	}
	if g.PRNumber < 0 {
		return fmt.Errorf("pr_number must be positive (0: none): %w", errdefs.ErrInvalidGitRef)
	}
	if g.Branch != "" {
		if err := CheckBranch(g.Branch); err != nil {
			return err
		}
	}
	if g.Path == "" {
		g.Path = DefaultGitPath
	}
	if err := CheckGitPath(g.Path); err != nil {
		return err
	}
	if g.PRRef == "" {
		g.PRRef = DefaultGitPRRef
	}
	if err := CheckPRRef(g.PRRef); err != nil {
		return err
	}
	if g.PRNumber > 0 {
		if g.Branch != "" && g.Branch != PRBranch(g.PRNumber) {
			return fmt.Errorf("git_branch %q and pr_number %d conflict: a pull request is checked out on branch %s; leave git_branch out: %w",
				g.Branch, g.PRNumber, PRBranch(g.PRNumber), errdefs.ErrGitRefConflict)
		}
		g.Branch = PRBranch(g.PRNumber)
	}
	if g.TokenSecret != "" {
		if !envNamePattern.MatchString(g.TokenSecret) {
			return fmt.Errorf("git_token_secret %q is not a secret name: %w", g.TokenSecret, errdefs.ErrInvalidArgument)
		}
		if _, ok := g.Secrets[g.TokenSecret]; !ok {
			return fmt.Errorf("git_token_secret names %q, which is not among secrets: %w", g.TokenSecret, errdefs.ErrInvalidArgument)
		}
	}
	sb.GitRepo, sb.GitBranch, sb.PRNumber = g.Repo, g.Branch, g.PRNumber
	sb.GitPath, sb.GitPRRef, sb.GitTokenSecret = g.Path, g.PRRef, g.TokenSecret
	return nil
}

var envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// GitToken is the token and user name git gets for sb (empty: none):
// secrets[git_token_secret], else secrets.GIT_TOKEN.
func GitToken(sb Sandbox, secrets map[string]string) (username, token string) {
	name := sb.GitTokenSecret
	if name == "" {
		name = DefaultGitTokenSecret
	}
	token = secrets[name]
	if token == "" {
		return "", ""
	}
	username = secrets[GitUsernameSecret]
	if username == "" {
		username = GitDefaultUsername
	}
	return username, token
}

// ForkGit checks a clone call's git overrides against the parent and
// returns them as Inherit applies them: a pull request without a branch
// moves the child to pr-N; a branch and pull request together must agree
// as at create.
func ForkGit(parent Sandbox, o ForkOverrides) (ForkOverrides, error) {
	if o.GitBranch == nil && o.PRNumber == nil {
		return o, nil
	}
	if !HasClone(parent) {
		return o, fmt.Errorf("git_branch and pr_number need a sandbox with a git_repo; %s has none: %w", parent.ID, errdefs.ErrNoGitRepo)
	}
	if o.GitBranch != nil {
		if err := CheckBranch(*o.GitBranch); err != nil {
			return o, err
		}
	}
	if o.PRNumber != nil {
		n := *o.PRNumber
		if n <= 0 {
			return o, fmt.Errorf("pr_number must be positive: %w", errdefs.ErrInvalidGitRef)
		}
		if o.GitBranch != nil && *o.GitBranch != PRBranch(n) {
			return o, fmt.Errorf("git_branch %q and pr_number %d conflict: a pull request is checked out on branch %s; leave git_branch out: %w",
				*o.GitBranch, n, PRBranch(n), errdefs.ErrGitRefConflict)
		}
		b := PRBranch(n)
		o.GitBranch = &b
	}
	return o, nil
}

// HasClone reports whether sb's repository was cloned: it has git_repo and
// a git_path (sandboxes made before clones were real have only the first).
func HasClone(sb Sandbox) bool { return sb.GitRepo != "" && sb.GitPath != "" }

// GitSwitch is what a fork child checks out after it resumes: nothing
// (ok false) when it stays on its parent's branch.
type GitSwitch struct {
	Branch string // the local branch
	// PullRef, when set, is fetched and Branch (re)made at it; otherwise
	// Branch is checked out, made from the current HEAD if missing.
	PullRef string
}

// ForkSwitch is the checkout child needs, given its parent.
func ForkSwitch(parent, child Sandbox) (GitSwitch, bool) {
	if !HasClone(child) || child.GitBranch == parent.GitBranch && child.PRNumber == parent.PRNumber {
		return GitSwitch{}, false
	}
	if child.PRNumber > 0 && child.GitBranch == PRBranch(child.PRNumber) && child.PRNumber != parent.PRNumber {
		return GitSwitch{Branch: child.GitBranch, PullRef: PullRef(child.GitPRRef, child.PRNumber)}, true
	}
	if child.GitBranch == parent.GitBranch {
		return GitSwitch{}, false
	}
	return GitSwitch{Branch: child.GitBranch}, true
}

// userinfo matches credentials in a URL (scheme://user:pass@).
var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@`)

// RedactGit removes secrets (the token, and any credentials a URL in s
// carries) from text git wrote, before it is stored or shown.
func RedactGit(s string, secrets ...string) string {
	for _, v := range secrets {
		if len(v) >= 4 { // shorter would redact ordinary words
			s = strings.ReplaceAll(s, v, "[REDACTED]")
		}
	}
	return userinfo.ReplaceAllString(s, "${1}[REDACTED]@")
}
