package e2e

import (
	"context"
	"os"
	"testing"

	"github.com/zeish/zeish/internal/testenv/ociimg"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// templateOnCluster builds a template from an uploaded image through the
// control plane: it is built on a node, which holds it, its build log is
// read through the control plane, and a sandbox of it runs on that node.
func (l *lab) templateOnCluster(ctx context.Context) {
	t := l.t
	t.Helper()
	tpl := l.uploadTemplate(ctx, t, "img")
	if _, ok := l.nodes[tpl.Host]; !ok {
		t.Fatalf("template %s held by %q, not one of the nodes", tpl.ID, tpl.Host)
	}
	tpl, err := l.client.WaitTemplate(ctx, tpl.ID, nil)
	if err != nil || tpl.State != sandbox.TemplateReady {
		t.Fatalf("template build on %s: %+v %v", tpl.Host, tpl, err)
	}
	var last zeish.TemplateEvent
	if err := l.client.TemplateEvents(ctx, "img", func(e zeish.TemplateEvent) error { last = e; return nil }); err != nil ||
		last.Type != "state" || last.Template == nil || last.Template.State != sandbox.TemplateReady {
		t.Fatalf("build log through the control plane: %+v %v", last, err)
	}
	sb, err := l.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Template: "img", MemoryMiB: 128}, zeish.Wait())
	if err != nil {
		t.Fatal(err)
	}
	if sb.Host != tpl.Host || sb.Template != tpl.ID || sb.State != sandbox.StateRunning {
		t.Fatalf("sandbox of template %s (held by %s): %+v", tpl.ID, tpl.Host, sb)
	}
	if out := l.execOn(ctx, sb.ID, sb.Host, "id -u; pwd; echo $GREETING"); out != "1000\n/work\nhello from the image" {
		t.Fatalf("in the template's sandbox: %q", out)
	}
	if _, err := l.client.DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}
}

// uploadTemplate uploads the standard test image as cold template name
// through the control plane; its build runs in the background.
func (l *lab) uploadTemplate(ctx context.Context, t *testing.T, name string) zeish.Template {
	t.Helper()
	f, err := os.Open(ociimg.WriteDockerArchive(t, ociimg.Standard(t), t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tpl, err := l.client.UploadTemplate(ctx, zeish.BuildTemplateRequest{Name: name, From: "docker-archive", DiskMiB: 256, Cold: true}, f)
	if err != nil {
		t.Fatalf("upload a template through the control plane: %v", err)
	}
	return tpl
}
