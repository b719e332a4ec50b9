package catalog

import (
	"testing"

	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/template"
)

// A create without a template gets debian once it is enabled and built,
// base before (docs/templates.md: debian is the default once it is built).
func TestDefaultTemplate(t *testing.T) {
	c := New(nil, template.BaseOptions{})
	if got := c.Default(); got != BaseName {
		t.Errorf("debian not enabled: default %q", got)
	}
	c.EnableDebian(template.DebianOptions{})
	if got := c.Default(); got != BaseName {
		t.Errorf("debian enabled, not built: default %q", got)
	}
	c.derived[DebianName].t = &sandbox.Template{Name: DebianName}
	if got := c.Default(); got != DebianName {
		t.Errorf("debian built: default %q", got)
	}
}
