package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/blob/folder"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/sandbox"
)

// TestTemplateFromAnotherNode: a template built on node-1 is uploaded when
// it is ready; node-2, sharing the image store, refuses a create from it
// until the upload is whole, then fetches its files once into its template
// cache and boots from them. Past the cache's bound the least recently
// used template no sandbox stands on goes; one a sandbox stands on stays,
// however old. A deleted template leaves the store.
func TestTemplateFromAnotherNode(t *testing.T) {
	ctx := context.Background()
	shared, remote := sharedImageStore(t)
	builder := newHarness(t, remote)
	other := newHarness(t, remote, func(o *Options) { o.ID, o.TemplateCacheMiB = "node-2", 1 })

	// Three templates built on node-1, 768 KiB of disk each: two fit in
	// node-2's 1 MiB cache bound, three do not.
	art := t.TempDir()
	built := map[string]sandbox.Template{}
	for _, id := range []string{"tpl_one", "tpl_two", "tpl_three"} {
		tpl := sandbox.Template{ID: id, Name: strings.TrimPrefix(id, "tpl_"), Host: "node-1", Hash: "h-" + id,
			Kernel: filepath.Join(art, id+".vmlinuz"), BaseDisk: filepath.Join(art, id+".img")}
		disk := make([]byte, 768<<10)
		rand.Read(disk)
		if err := os.WriteFile(tpl.Kernel, []byte("kernel of "+id), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(tpl.BaseDisk, disk, 0o600); err != nil {
			t.Fatal(err)
		}
		built[id] = tpl
	}

	one := built["tpl_one"]
	if err := other.n.templateReady(ctx, one); !errdefs.Is(err, errdefs.ClassUnavailable) || !strings.Contains(err.Error(), "not in the image store yet") {
		t.Fatalf("a template not uploaded yet: %v, want unavailable", err)
	}
	// createFrom publishes tpl on node-1, waits until it is whole in the
	// store and creates from it on node-2.
	createFrom := func(tpl sandbox.Template) string {
		t.Helper()
		builder.n.PublishTemplate(tpl)
		until(t, func() bool {
			ok, err := shared.Durable(ctx, templateImage(tpl))
			return err == nil && ok
		})
		if err := other.n.templateReady(ctx, tpl); err != nil {
			t.Fatalf("template %s durable: %v", tpl.ID, err)
		}
		other.tpl.set(tpl)
		r := other.create(tpl.Name, sandbox.StateRunning)
		cached := filepath.Join(other.opts.DataDir, templateCacheDir, tpl.ID)
		if r.Kernel != filepath.Join(cached, tplKernel) {
			t.Fatalf("sandbox of %s boots kernel %s, want the cached copy in %s", tpl.ID, r.Kernel, cached)
		}
		for from, to := range map[string]string{tpl.Kernel: filepath.Join(cached, tplKernel), tpl.BaseDisk: filepath.Join(cached, tplDisk)} {
			want, _ := os.ReadFile(from)
			if got, err := os.ReadFile(to); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("cached %s: %v, differs from node-1's %s", to, err, from)
			}
		}
		return r.ID
	}
	inCache := func() map[string]bool {
		entries, _ := os.ReadDir(filepath.Join(other.opts.DataDir, templateCacheDir))
		out := map[string]bool{}
		for _, e := range entries {
			out[e.Name()] = true
		}
		return out
	}

	first := createFrom(one)
	again := other.create("again", sandbox.StateRunning) // cached: no second fetch
	if r := again; !strings.HasPrefix(r.Kernel, filepath.Join(other.opts.DataDir, templateCacheDir, one.ID)) {
		t.Fatalf("a second create boots %s", r.Kernel)
	}
	second := createFrom(built["tpl_two"])
	if _, err := other.n.Delete(ctx, second); err != nil {
		t.Fatal(err)
	}
	other.settle(second, sandbox.StateDestroyed)
	createFrom(built["tpl_three"])
	// tpl_one is the oldest but its sandboxes stand on it; tpl_two goes.
	if got := inCache(); !got["tpl_one"] || got["tpl_two"] || !got["tpl_three"] {
		t.Fatalf("template cache after a third fetch past 1 MiB: %v, want tpl_one (in use) and tpl_three", got)
	}
	if r := other.get(first); r.State != sandbox.StateRunning {
		t.Fatalf("the first sandbox of tpl_one: %s", r.State)
	}
	// A deleted template leaves the store (its builder's catalog asks);
	// twice is fine, and another node's call deletes nothing of it.
	two := built["tpl_two"]
	if err := other.n.UnpublishTemplate(ctx, two); err != nil {
		t.Fatal(err)
	}
	if ok, err := shared.Durable(ctx, templateImage(two)); err != nil || !ok {
		t.Fatalf("tpl_two after node-2 unpublished it: durable %v %v, want still there", ok, err)
	}
	for range 2 {
		if err := builder.n.UnpublishTemplate(ctx, two); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := shared.Durable(ctx, templateImage(two)); err != nil || ok {
		t.Fatalf("tpl_two after its builder unpublished it: durable %v %v", ok, err)
	}
}

// sharedImageStore is an image store in a folder, and the option that
// makes a node share it.
func sharedImageStore(t *testing.T) (*imagestore.Store, func(*Options)) {
	b, err := folder.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	shared := imagestore.New(b, imagestore.Options{})
	return shared, func(o *Options) {
		o.ImageStore = &images.Remote{Store: shared, ShmDir: o.ShmDir, WaitDurable: 5 * time.Second}
	}
}

// until polls cond for up to 10 s.
func until(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not within 10 s")
		}
	}
}
