package node

import (
	"context"
	"fmt"
	"net/url"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/gitws"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// A sandbox's repository is cloned after its first boot and before it is
// reported running; a fork child that asked for another branch or pull
// request checks it out after it resumed, before it is reported running.
// Either failing fails the boot (git_clone_failed), so no sandbox runs
// without the checkout it asked for.

// gitAuth is the credential r's guest agent keeps for its clone's host
// (nil: none, or a git:// repository, which has no authentication).
func gitAuth(r *store.SandboxRecord) *guest.GitAuth {
	if r.GitRepo == "" {
		return nil
	}
	username, token := sandbox.GitToken(r.Sandbox, r.SecretEnv)
	u, err := url.Parse(r.GitRepo)
	if token == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil
	}
	return &guest.GitAuth{Protocol: u.Scheme, Host: u.Host, Username: username, Password: token, User: sandbox.GitUser}
}

// gitSecrets are the values a git message must never show.
func gitSecrets(r *store.SandboxRecord) []string {
	var out []string
	if _, token := sandbox.GitToken(r.Sandbox, r.SecretEnv); token != "" {
		out = append(out, token)
	}
	return out
}

// gitClone clones r's repository in its guest (attached just now).
func (n *Node) gitClone(ctx context.Context, r *store.SandboxRecord) error {
	c := n.agents.Live(r.ID)
	if c == nil {
		return fmt.Errorf("git clone: the guest agent is gone: %w", errdefs.ErrUnavailable)
	}
	err := gitws.Clone(ctx, c, r.Sandbox, gitAuth(r) != nil, gitSecrets(r)...)
	if err == nil {
		n.log.Info("git cloned", logSandbox, r.ID, "branch", r.GitBranch, "pr", r.PRNumber)
	}
	return err
}

// gitSwitch checks out what a fork child asked for.
func (n *Node) gitSwitch(ctx context.Context, r *store.SandboxRecord, sw sandbox.GitSwitch) error {
	c := n.agents.Live(r.ID)
	if c == nil {
		return fmt.Errorf("git checkout: the guest agent is gone: %w", errdefs.ErrUnavailable)
	}
	err := gitws.Switch(ctx, c, r.GitPath, sw, gitSecrets(r)...)
	if err == nil {
		n.log.Info("git switched", logSandbox, r.ID, "branch", sw.Branch, "pull_ref", sw.PullRef)
	}
	return err
}
