package node

import (
	"context"
	"strings"

	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// templateDefaults adds the template's exec defaults (an image's Env,
// WorkingDir and User) and start command to a guest configuration. The
// sandbox's own env wins over the template's. The guest runs the start
// command once per boot, so forks and restores of a running machine (and
// sandboxes started from a warm template) do not start it twice.
func (n *Node) templateDefaults(ctx context.Context, r *store.SandboxRecord, cfg *guest.Config) {
	tpl, err := n.opts.Templates.Get(ctx, r.Template)
	if err != nil {
		n.log.Warn("template defaults", logSandbox, r.ID, "template", r.Template, "err", err)
		return
	}
	applyTemplate(&tpl, cfg)
}

func applyTemplate(tpl *sandbox.Template, cfg *guest.Config) {
	if len(tpl.Env) > 0 {
		env := make(map[string]string, len(tpl.Env)+len(cfg.Env))
		for _, kv := range tpl.Env {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				env[k] = v
			}
		}
		for k, v := range cfg.Env {
			env[k] = v
		}
		cfg.Env = env
	}
	cfg.User, cfg.Cwd, cfg.StartCmd = tpl.User, tpl.WorkingDir, tpl.StartCmd
}
