package catalog

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/template"
)

// browser and desktop are refused on a template without the software, with
// a message naming one that has it (or saying how to get one).
func TestRequireFeatures(t *testing.T) {
	ctx := context.Background()
	c, _ := newTestCatalog(t)
	debian := sandbox.Template{Name: DebianName, Builtin: true}
	desktop := sandbox.Template{Name: DesktopName, Builtin: true, Features: []string{sandbox.FeatureBrowser, sandbox.FeatureDesktop}}
	onlyBrowser := sandbox.Template{Name: "chrome", Features: []string{sandbox.FeatureBrowser}}

	check := func(name string, tpl sandbox.Template, want []string, wantErr string) {
		t.Helper()
		err := c.RequireFeatures(ctx, "acct", tpl, want)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case wantErr != "" && (!errors.Is(err, errdefs.ErrLacksFeature) || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("%s: got %v, want template_lacks_feature saying %q", name, err, wantErr)
		}
	}
	check("nothing asked", debian, nil, "")
	check("no desktop template anywhere", debian, []string{sandbox.FeatureBrowser},
		`template "debian" has no browser (no template on this server has it; zeishd builds the built-in "desktop" template with ZEISH_DESKTOP_TEMPLATE=on)`)
	check("has it", desktop, []string{sandbox.FeatureBrowser, sandbox.FeatureDesktop}, "")
	check("has part", onlyBrowser, []string{sandbox.FeatureBrowser, sandbox.FeatureDesktop}, `template "chrome" has no desktop`)

	c.EnableDesktop(template.DebianOptions{})
	check("desktop enabled", debian, []string{sandbox.FeatureBrowser, sandbox.FeatureDesktop},
		`template "debian" has no browser and desktop (use template "desktop")`)
	if tpl, err := c.FeaturesOf(ctx, DesktopName); err != nil || !tpl.Has(sandbox.FeatureBrowser) {
		t.Errorf("FeaturesOf(desktop) = %+v, %v", tpl, err)
	}
	if tpl, err := c.Resolve(ctx, "acct", DesktopName); err != nil || !tpl.Has(sandbox.FeatureDesktop) || tpl.State != sandbox.TemplateBuilding {
		t.Errorf("Resolve(desktop) before its build = %+v, %v", tpl, err)
	}
	if tpl, err := c.FeaturesOf(ctx, BaseName); err != nil || len(tpl.Features) != 0 {
		t.Errorf("FeaturesOf(base) = %+v, %v", tpl, err)
	}
	if err := c.nameFree(ctx, "acct", DesktopName); !errors.Is(err, errdefs.ErrNameTaken) {
		t.Errorf("an account template named desktop: %v", err)
	}
}

// An account template that carries the features is named when no built-in does.
func TestRequireFeaturesNamesAccountTemplate(t *testing.T) {
	ctx := context.Background()
	c, _ := newTestCatalog(t)
	if err := c.store.PutTemplate(ctx, sandbox.Template{ID: "tpl_x", Name: "mine", AccountID: "acct", State: sandbox.TemplateReady,
		Features: []string{sandbox.FeatureBrowser}}); err != nil {
		t.Fatal(err)
	}
	err := c.RequireFeatures(ctx, "acct", sandbox.Template{Name: BaseName}, []string{sandbox.FeatureBrowser})
	if !errors.Is(err, errdefs.ErrLacksFeature) || !strings.Contains(err.Error(), `use template "mine"`) {
		t.Errorf("got %v", err)
	}
	err = c.RequireFeatures(ctx, "other", sandbox.Template{Name: BaseName}, []string{sandbox.FeatureBrowser})
	if !errors.Is(err, errdefs.ErrLacksFeature) || strings.Contains(err.Error(), "mine") {
		t.Errorf("another account's template named: %v", err)
	}
}
