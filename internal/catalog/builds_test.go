package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testenv/ociimg"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/template"
)

func newTestCatalog(t *testing.T) (*Catalog, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "zeish.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	agent := filepath.Join(dir, "sandboxd")
	b, _ := os.ReadFile("/bin/busybox") // a static stand-in for the agent
	os.WriteFile(agent, b, 0o755)
	return New(st, template.BaseOptions{CacheDir: filepath.Join(dir, "cache"), SandboxdPath: agent}), dir
}

func waitSettled(t *testing.T, c *Catalog, id string) sandbox.Template {
	t.Helper()
	for i := 0; i < 600; i++ {
		tpl, err := c.store.GetTemplate(context.Background(), id)
		if err == nil && tpl.State != sandbox.TemplateBuilding {
			return tpl
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("template %s still building", id)
	return sandbox.Template{}
}

// A zeishd that stopped mid-build left rows in state building: the next
// one builds those whose inputs it still has again, and fails the ones that
// needed credentials it did not keep, saying so.
func TestBuildsResumeAfterRestart(t *testing.T) {
	testenv.RequireQEMU(t)
	c, dir := newTestCatalog(t)
	ctx := context.Background()
	builds := filepath.Join(dir, "builds")
	archive := ociimg.WriteDockerArchive(t, ociimg.Standard(t), dir)
	rows := []struct {
		id   string
		spec buildSpec
	}{
		{"tpl_resumeaaaaaaaaaaaaaaa", buildSpec{Transport: "docker-archive", Ref: archive}},
		{"tpl_credsaaaaaaaaaaaaaaaa", buildSpec{Transport: "registry", Ref: "127.0.0.1:1/a:b", HasAuth: true}},
	}
	for _, r := range rows {
		if err := c.store.PutTemplate(ctx, sandbox.Template{ID: r.id, Name: r.id[4:10], AccountID: "acc_x", State: sandbox.TemplateBuilding, DiskMiB: 128}); err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(builds, r.id), 0o700)
		b, _ := json.Marshal(r.spec)
		os.WriteFile(filepath.Join(builds, r.id, "spec.json"), b, 0o600)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := c.StartBuilds(sctx, BuildOptions{Dir: builds, Parallel: 1}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := waitSettled(t, c, rows[0].id); got.State != sandbox.TemplateReady || got.User != "app" || got.BaseDisk == "" {
		t.Errorf("resumed build: %+v", got)
	}
	if got := waitSettled(t, c, rows[1].id); got.State != sandbox.TemplateError || !strings.Contains(got.StateReason, "credentials") {
		t.Errorf("build with credentials: %+v", got)
	}
	events, _ := c.Events(rows[0].id, 0)
	if len(events) == 0 || events[0].Message != "zeishd restarted: building again" {
		t.Errorf("events of the resumed build: %+v", events)
	}
}

// Names are unique per account among live templates; deleting hides a
// template at once and sweeps its files when nothing uses them.
func TestBuildNamesAndDelete(t *testing.T) {
	testenv.RequireQEMU(t)
	c, dir := newTestCatalog(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.StartBuilds(ctx, BuildOptions{Dir: filepath.Join(dir, "builds")}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	archive := ociimg.WriteDockerArchive(t, ociimg.Standard(t), dir)
	f, _ := os.Open(archive)
	defer f.Close()
	req := BuildRequest{AccountID: "acc_a", Name: "py", Source: template.Source{Transport: "docker-archive"}, Upload: f, DiskMiB: 128}
	tpl, err := c.Build(ctx, req)
	if err != nil || tpl.State != sandbox.TemplateBuilding || tpl.Source != "docker-archive:upload" {
		t.Fatalf("build: %+v %v", tpl, err)
	}
	if _, err := c.Build(ctx, BuildRequest{AccountID: "acc_a", Name: "py", Source: template.Source{Transport: "registry", Ref: "x/y"}}); !errors.Is(err, errdefs.ErrNameTaken) {
		t.Errorf("same name again: %v", err)
	}
	got := waitSettled(t, c, tpl.ID)
	if got.State != sandbox.TemplateReady {
		t.Fatalf("build: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "builds", tpl.ID, uploadName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("upload kept after the build: %v", err)
	}
	if _, err := c.Resolve(ctx, "acc_b", tpl.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("other account resolves it: %v", err)
	}
	if _, err := c.Delete(ctx, "acc_a", "py"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Resolve(ctx, "acc_a", "py"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("deleted template resolves: %v", err)
	}
	if _, err := os.Stat(got.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("files of an unused deleted template kept: %v", err)
	}
	if _, err := c.store.GetTemplate(ctx, tpl.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("row of a swept template kept: %v", err)
	}
	// The name is free again.
	if err := c.nameFree(ctx, "acc_a", "py"); err != nil {
		t.Errorf("name after delete: %v", err)
	}
}

// On a cluster's node agent the database is shared: a node resumes, fails
// and sweeps only the templates it holds, and records its own builds as
// held there.
func TestBuildsOfOtherNodes(t *testing.T) {
	c, dir := newTestCatalog(t)
	ctx := context.Background()
	rows := []sandbox.Template{
		{ID: "tpl_othernodebuildingaaaa", Name: "building", AccountID: "acc_x", State: sandbox.TemplateBuilding, Host: "node-b"},
		{ID: "tpl_othernodedeletedaaaaa", Name: "deleted", AccountID: "acc_x", State: sandbox.TemplateDeleted, Host: "node-b"},
		{ID: "tpl_thisnodebuildingaaaaa", Name: "mine", AccountID: "acc_x", State: sandbox.TemplateBuilding, Host: "node-a"},
	}
	for _, r := range rows {
		if err := c.store.PutTemplate(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := c.StartBuilds(sctx, BuildOptions{Dir: filepath.Join(dir, "builds"), Host: "node-a"}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Sweep(ctx)
	for _, want := range []struct {
		id    string
		state sandbox.TemplateState
	}{{rows[0].ID, sandbox.TemplateBuilding}, {rows[1].ID, sandbox.TemplateDeleted}, {rows[2].ID, sandbox.TemplateError}} {
		got, err := c.store.GetTemplate(ctx, want.id)
		if err != nil || got.State != want.state {
			t.Errorf("%s: %+v %v, want %s", want.id, got.State, err, want.state)
		}
	}
	tpl, err := c.Build(ctx, BuildRequest{AccountID: "acc_x", Name: "new", Source: template.Source{Transport: "registry", Ref: "127.0.0.1:1/a:b"}})
	if err != nil || tpl.Host != "node-a" {
		t.Fatalf("build on node-a: %+v %v", tpl, err)
	}
	waitSettled(t, c, tpl.ID)
}
