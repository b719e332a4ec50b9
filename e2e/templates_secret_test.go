package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testenv/ociimg"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// TestTemplateRegistrySecret: a registry on loopback wants basic auth. A
// build naming a secret the account lacks is 400 unknown_secret and builds
// nothing; without credentials, or with a wrong secret, the build ends in
// error with the registry's 401; with the account secret (stored by
// zeishctl secrets set, named by templates build --registry-secret) it
// builds and boots; a create asking for less disk than the template's is
// 400 disk_too_small. The credential appears in no answer, build log or
// server log, and not in the build's folder.
func TestTemplateRegistrySecret(t *testing.T) {
	s := startServer(t, loopbackRegistries)
	ctx := ctxFor(t, 15*time.Minute)
	c := s.client
	const password = "pw-9f3c1e77-registry"
	img, err := mutate.AppendLayers(ociimg.Standard(t), ociimg.Layer(t, ociimg.Entry{Name: "run-id", Body: sandbox.NewID("run_")}))
	if err != nil {
		t.Fatal(err)
	}
	host := ociimg.Registry(t, "alice", password)
	ref := ociimg.Push(t, img, host, "team/secret", "alice", password)

	_, err = c.BuildTemplate(ctx, zeish.BuildTemplateRequest{Name: "sec-none", From: "registry:" + ref, RegistrySecret: "NOPE"})
	if !errors.Is(err, errdefs.ErrUnknownSecret) {
		t.Fatalf("unknown secret: %v, want unknown_secret", err)
	}
	if _, err := c.GetTemplate(ctx, "sec-none"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a refused build left a template: %v", err)
	}

	if _, err := c.PutSecret(ctx, "WRONG", "alice:not-it"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ name, secret string }{{"sec-anon", ""}, {"sec-wrong", "WRONG"}} {
		tpl, err := c.BuildTemplate(ctx, zeish.BuildTemplateRequest{Name: f.name, From: "registry:" + ref, RegistrySecret: f.secret, DiskMiB: 256, Cold: true})
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if tpl, err = c.WaitTemplate(ctx, tpl.ID, nil); err != nil || tpl.State != sandbox.TemplateError || !strings.Contains(tpl.StateReason, "401") {
			t.Errorf("%s: %s %q %v, want an error with the registry's 401", f.name, tpl.State, tpl.StateReason, err)
		}
	}

	if out, errOut, code := s.zeishctl(t, "alice:"+password+"\n", "secrets", "set", "REGISTRY"); code != 0 || strings.Contains(out+errOut, password) {
		t.Fatalf("secrets set: exit %d: %s %s", code, out, errOut)
	}
	if out, _, code := s.zeishctl(t, "", "secrets", "list"); code != 0 || !strings.Contains(out, "REGISTRY") || strings.Contains(out, password) {
		t.Fatalf("secrets list: exit %d: %s", code, out)
	}
	out, errOut, code := s.zeishctl(t, "", "templates", "build", "--name", "sec-ok", "--from", "registry:"+ref,
		"--registry-secret", "REGISTRY", "--disk-mib", "2048", "--cold", "-o", "json")
	if code != 0 {
		t.Fatalf("templates build --registry-secret: exit %d: %s\n%s", code, errOut, out)
	}
	tpl, err := c.GetTemplate(ctx, "sec-ok")
	if err != nil || tpl.State != sandbox.TemplateReady {
		t.Fatalf("template: %+v %v", tpl, err)
	}
	// A disk smaller than the template's is refused at the edge.
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "sec-ok", DiskMiB: 1024}); !errors.Is(err, errdefs.ErrDiskTooSmall) || !strings.Contains(err.Error(), "2048 MiB") {
		t.Errorf("disk_mib 1024 from a 2048 MiB template: %v, want disk_too_small naming 2048 MiB", err)
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "sec-ok", MemoryMiB: 256}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("create: %+v %v", sb, err)
	}
	conn, err := c.Connect(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	checkImageSandbox(t, conn)
	if _, err := c.DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}

	// The credential is nowhere: not in answers, build logs, the server's
	// log or any file zeishd wrote for the builds (the secret's name is).
	var log strings.Builder
	for _, name := range []string{"sec-anon", "sec-wrong", "sec-ok"} {
		if err := c.TemplateEvents(ctx, name, func(e zeish.TemplateEvent) error { log.WriteString(e.Message + "\n"); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for what, text := range map[string]string{"build logs": log.String(), "zeishd log": s.logText(), "build output": out + errOut} {
		if strings.Contains(text, password) || strings.Contains(text, "not-it") {
			t.Errorf("the registry credential is in the %s", what)
		}
	}
	filepath.WalkDir(filepath.Join(s.dataDir, "template-builds"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, _ := os.ReadFile(p); strings.Contains(string(b), password) {
			t.Errorf("the registry credential is in %s", p)
		}
		return nil
	})
	if err := c.DeleteSecret(ctx, "REGISTRY"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BuildTemplate(ctx, zeish.BuildTemplateRequest{Name: "sec-gone", From: "registry:" + ref, RegistrySecret: "REGISTRY"}); !errors.Is(err, errdefs.ErrUnknownSecret) {
		t.Errorf("deleted secret: %v, want unknown_secret", err)
	}
}
