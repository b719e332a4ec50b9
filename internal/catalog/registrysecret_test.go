package catalog

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/template"
)

// A build whose registry credentials came from an account secret resumes
// after a restart by reading the secret again (its spec keeps only the
// name); inline credentials, or a secret deleted since, cannot resume.
func TestResumableRegistrySecret(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := testenv.SQLite(t)
	if err := st.PutAccountSecret(ctx, store.AccountSecret{AccountID: "acc_x", Name: "REG", Value: "bob:pw", UpdatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	c := New(st, template.BaseOptions{CacheDir: filepath.Join(dir, "cache")})
	c.b = &builds{dir: filepath.Join(dir, "builds")}
	for _, tc := range []struct {
		name string
		spec buildSpec
		ok   bool
		user string
	}{
		{"secret", buildSpec{Transport: "registry", Ref: "h/a:b", RegistrySecret: "REG"}, true, "bob"},
		{"secret gone", buildSpec{Transport: "registry", Ref: "h/a:b", RegistrySecret: "GONE"}, false, ""},
		{"inline credentials", buildSpec{Transport: "registry", Ref: "h/a:b", HasAuth: true}, false, ""},
		{"anonymous", buildSpec{Transport: "registry", Ref: "h/a:b"}, true, ""},
	} {
		tpl := sandbox.Template{ID: "tpl_" + tc.name, AccountID: "acc_x", Name: "t"}
		os.MkdirAll(filepath.Join(c.b.dir, tpl.ID), 0o700)
		b, _ := json.Marshal(tc.spec)
		if err := os.WriteFile(filepath.Join(c.b.dir, tpl.ID, "spec.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		req, ok := c.resumable(ctx, tpl)
		if ok != tc.ok || req.Source.Username != tc.user || (tc.user != "" && req.Source.Password != "pw") {
			t.Errorf("%s: resumable = %+v, %v", tc.name, req.Source, ok)
		}
		if tc.ok && req.RegistrySecret != tc.spec.RegistrySecret {
			t.Errorf("%s: the resumed request lost registry_secret", tc.name)
		}
	}
}
