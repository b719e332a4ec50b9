package catalog

import (
	"context"
	"fmt"
	"slices"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
)

// RequireFeatures refuses a sandbox of tpl that asks for features tpl does
// not carry (the software is not on its disk), naming a template the
// account may use that carries them all, or how to get one.
func (c *Catalog) RequireFeatures(ctx context.Context, accountID string, tpl sandbox.Template, want []string) error {
	var missing []string
	for _, f := range want {
		if !tpl.Has(f) {
			missing = append(missing, f)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	hint := fmt.Sprintf("no template on this server has it; zeishd builds the built-in %q template with ZEISH_DESKTOP_TEMPLATE=on", DesktopName)
	if name := c.withFeatures(ctx, accountID, want); name != "" {
		hint = fmt.Sprintf("use template %q", name)
	}
	return fmt.Errorf("template %q has no %s (%s): %w", tpl.Name, joinAnd(missing), hint, errdefs.ErrLacksFeature)
}

// FeaturesOf returns the features of the template a sandbox boots from
// (its key: a built-in's name or an account template's id), without
// building anything.
func (c *Catalog) FeaturesOf(ctx context.Context, key string) (sandbox.Template, error) {
	if d := c.derivedOf(key); d != nil {
		return sandbox.Template{Name: key, Builtin: true, Features: d.features}, nil
	}
	if key == BaseName {
		return sandbox.Template{Name: key, Builtin: true}, nil
	}
	t, err := c.store.GetTemplate(ctx, key)
	if err != nil {
		return t, fmt.Errorf("template %q: %w", key, errdefs.ErrUnknownTemplate)
	}
	return t, nil
}

// withFeatures names a template the account may use that carries every
// feature in want: an enabled built-in first, then a ready one in the store.
func (c *Catalog) withFeatures(ctx context.Context, accountID string, want []string) string {
	has := func(features []string) bool {
		for _, f := range want {
			if !slices.Contains(features, f) {
				return false
			}
		}
		return true
	}
	for _, d := range c.enabledDerived() {
		if has(d.features) {
			return d.name
		}
	}
	list, err := c.List(ctx, accountID)
	if err != nil {
		return ""
	}
	for _, t := range list {
		if t.State == sandbox.TemplateReady && has(t.Features) {
			return t.Name
		}
	}
	return ""
}

func joinAnd(words []string) string {
	switch len(words) {
	case 0:
		return ""
	case 1:
		return words[0]
	}
	out := words[0]
	for _, w := range words[1 : len(words)-1] {
		out += ", " + w
	}
	return out + " and " + words[len(words)-1]
}
