// Package gitws does a sandbox's git work inside its guest, through the
// guest agent's exec: the clone at create, the checkout a fork child makes,
// and the status the API reports. git runs as the clone's owner
// (sandbox.GitUser); credentials reach it only through the agent's
// credential helper (guest/gitcred.go), never on a command line.
package gitws

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/sandbox"
)

// Execer runs a process in the guest (*guest.Client).
type Execer interface {
	Exec(ctx context.Context, req guest.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (guest.ExecResult, error)
}

// Error is git failing in the guest: its words, credentials redacted.
type Error struct {
	Step string // "clone", "fetch", "checkout", "status"
	Msg  string
}

func (e *Error) Error() string { return "git " + e.Step + ": " + e.Msg }

// NoGit says the guest has no git.
var NoGit = errors.New("git is not installed in this sandbox's template")

// gitTimeout bounds one network step (clone, fetch).
const gitTimeout = 10 * time.Minute

// maxOutput bounds what is kept of a git command's output.
const maxOutput = 1 << 20

// runner runs git steps for one sandbox; secrets are redacted from every
// message.
type runner struct {
	c       Execer
	secrets []string
}

// run runs argv as user in the guest and returns its stdout; a non-zero
// exit is an *Error with git's stderr.
func (r runner) run(ctx context.Context, step, user string, timeout time.Duration, argv ...string) (string, error) {
	var out, errOut limitedBuffer
	out.max, errOut.max = maxOutput, 64<<10
	res, err := r.c.Exec(ctx, guest.ExecRequest{
		Argv: argv, User: user, Timeout: timeout,
		// No prompt ever waits for a terminal; messages stay in English
		// (the API shows them).
		Env: map[string]string{"GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never", "LC_ALL": "C"},
	}, nil, &out, &errOut)
	if errors.Is(err, errdefs.ErrFileNotFound) {
		return "", fmt.Errorf("git %s: %w", step, NoGit)
	}
	if err != nil {
		return "", fmt.Errorf("git %s: %w", step, err)
	}
	if res.ExitCode == 127 {
		return "", fmt.Errorf("git %s: %w", step, NoGit)
	}
	if res.ExitCode != 0 || res.TimedOut {
		msg := strings.TrimSpace(dropProgress(errOut.String()))
		if res.TimedOut {
			msg = fmt.Sprintf("timed out after %s; %s", timeout, msg)
		}
		if msg == "" {
			msg = fmt.Sprintf("exit status %d", res.ExitCode)
		}
		return "", &Error{Step: step, Msg: sandbox.RedactGit(msg, r.secrets...)}
	}
	return out.String(), nil
}

func (r runner) git(ctx context.Context, step, path string, args ...string) (string, error) {
	return r.run(ctx, step, sandbox.GitUser, gitTimeout, append([]string{"git", "-C", path}, args...)...)
}

// Clone clones sb's repository into sb.GitPath (made and given to
// GitUser first) and checks out its branch or pull request. helper says
// the agent holds a credential: git is told to ask it, in the clone's
// config too, so later fetches and pushes authenticate the same way.
// secrets are redacted from every message.
func Clone(ctx context.Context, c Execer, sb sandbox.Sandbox, helper bool, secrets ...string) error {
	r := runner{c: c, secrets: secrets}
	if _, err := r.run(ctx, "clone", "root", time.Minute, "install", "-d", "-o", sandbox.GitUser, "-g", sandbox.GitUser, "-m", "0755", "--", sb.GitPath); err != nil {
		return err
	}
	argv := []string{"git", "clone", "--no-progress"}
	if helper {
		// The empty helper first drops any the template configures.
		argv = append(argv, "-c", "credential.helper=", "-c", "credential.helper="+guest.GitHelperCommand)
	}
	if sb.GitBranch != "" && sb.PRNumber == 0 {
		argv = append(argv, "--branch", sb.GitBranch)
	}
	argv = append(argv, "--", sb.GitRepo, sb.GitPath)
	if _, err := r.run(ctx, "clone", sandbox.GitUser, gitTimeout, argv...); err != nil {
		return err
	}
	if sb.PRNumber > 0 {
		return r.checkoutPull(ctx, sb.GitPath, sandbox.PRBranch(sb.PRNumber), sandbox.PullRef(sb.GitPRRef, sb.PRNumber))
	}
	return nil
}

// checkoutPull fetches a pull ref and puts branch at it.
func (r runner) checkoutPull(ctx context.Context, path, branch, ref string) error {
	if _, err := r.git(ctx, "fetch", path, "fetch", "--no-progress", "origin", "--", ref); err != nil {
		return err
	}
	_, err := r.git(ctx, "checkout", path, "switch", "--no-track", "-C", branch, "FETCH_HEAD")
	return err
}

// Switch is a fork child's checkout (sandbox.ForkSwitch): a pull request's
// branch made at its fetched ref, or a branch checked out, made from the
// current HEAD when neither it nor origin's branch of that name exists.
func Switch(ctx context.Context, c Execer, path string, sw sandbox.GitSwitch, secrets ...string) error {
	r := runner{c: c, secrets: secrets}
	if sw.PullRef != "" {
		return r.checkoutPull(ctx, path, sw.Branch, sw.PullRef)
	}
	for _, ref := range []string{"refs/heads/" + sw.Branch, "refs/remotes/origin/" + sw.Branch} {
		if _, err := r.git(ctx, "checkout", path, "show-ref", "--verify", "--quiet", ref); err == nil {
			_, err := r.git(ctx, "checkout", path, "switch", sw.Branch)
			return err
		} else if !errors.As(err, new(*Error)) {
			return err
		}
	}
	_, err := r.git(ctx, "checkout", path, "switch", "-c", sw.Branch)
	return err
}

// Status reads the clone at path.
func Status(ctx context.Context, c Execer, sb sandbox.Sandbox) (api.GitStatus, error) {
	r := runner{c: c}
	out, err := r.run(ctx, "status", sandbox.GitUser, time.Minute, "git", "-C", sb.GitPath, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all")
	if err != nil {
		return api.GitStatus{}, err
	}
	st := ParseStatus(out)
	st.Repo, st.Path = sb.GitRepo, sb.GitPath
	return st, nil
}

// ParseStatus reads git status --porcelain=v2 --branch -z.
func ParseStatus(out string) api.GitStatus {
	st := api.GitStatus{Dirty: []api.GitFile{}}
	entries := strings.Split(out, "\x00")
	for i := 0; i < len(entries); i++ {
		e := entries[i]
		switch {
		case strings.HasPrefix(e, "# branch.oid "):
			if oid := strings.TrimPrefix(e, "# branch.oid "); oid != "(initial)" {
				st.Head = oid
			}
		case strings.HasPrefix(e, "# branch.head "):
			if h := strings.TrimPrefix(e, "# branch.head "); h == "(detached)" {
				st.Detached = true
			} else {
				st.Branch = h
			}
		case strings.HasPrefix(e, "1 "), strings.HasPrefix(e, "u "):
			// "1 XY sub mH mI mW hH hI path", "u XY sub m1 m2 m3 mW h1 h2 h3 path"
			n := 9
			if e[0] == 'u' {
				n = 11
			}
			if f := strings.SplitN(e, " ", n); len(f) == n {
				addFile(&st, f[n-1], f[1])
			}
		case strings.HasPrefix(e, "2 "):
			// "2 XY sub mH mI mW hH hI Xscore path", then the original path.
			if f := strings.SplitN(e, " ", 10); len(f) == 10 {
				addFile(&st, f[9], f[1])
			}
			i++ // the original path
		case strings.HasPrefix(e, "? "):
			addFile(&st, strings.TrimPrefix(e, "? "), "??")
		}
	}
	return st
}

// addFile records one dirty file, git's "." (unchanged) shown as a space.
func addFile(st *api.GitStatus, path, xy string) {
	if len(st.Dirty) >= api.MaxGitDirty {
		st.Truncated = true
		return
	}
	st.Dirty = append(st.Dirty, api.GitFile{Path: path, Status: strings.ReplaceAll(xy, ".", " ")})
}

// dropProgress removes git's chatter ("Cloning into '…'...") that is no
// part of why it failed.
func dropProgress(s string) string {
	var keep []string
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "Cloning into ") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
