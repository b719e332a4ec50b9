package catalog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/template"
)

// Known (E2B's template alias lookup) answers for the caller's templates
// and the built-ins only: another account's template id or name is as
// unknown as one that never existed (issue 27: it used to reveal them).
func TestKnownIsPerAccount(t *testing.T) {
	ctx := context.Background()
	st := testenv.SQLite(t)
	c := New(st, template.BaseOptions{CacheDir: t.TempDir()})
	now := time.Now().UTC()
	for _, tpl := range []sandbox.Template{
		{ID: "tpl_aaaaaaaaaaaaaaaaaaaa", Name: "mine", AccountID: "acc_a", State: sandbox.TemplateReady, CreatedAt: now},
		{ID: "tpl_gggggggggggggggggggg", Name: "gone", AccountID: "acc_a", State: sandbox.TemplateDeleted, CreatedAt: now},
	} {
		if err := st.PutTemplate(ctx, tpl); err != nil {
			t.Fatal(err)
		}
	}
	known := func(account, ref string) error { return c.Known(ctx, account, ref) }
	for _, tc := range []struct {
		account, ref string
		known        bool
	}{
		{"acc_a", "tpl_aaaaaaaaaaaaaaaaaaaa", true},
		{"acc_a", "mine", true},
		{"acc_b", "tpl_aaaaaaaaaaaaaaaaaaaa", false},
		{"acc_b", "mine", false},
		{"acc_a", "tpl_gggggggggggggggggggg", false},
		{"acc_b", "base", true},
		{"acc_b", "tpl_nonenonenonenonenon", false},
	} {
		err := known(tc.account, tc.ref)
		if (err == nil) != tc.known || err != nil && !errors.Is(err, errdefs.ErrUnknownTemplate) {
			t.Errorf("%s asks for %s: %v, want known=%v", tc.account, tc.ref, err, tc.known)
		}
	}
}
