package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/blob/folder"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// reasonLog is a store that keeps every state_reason each sandbox was
// given.
type reasonLog struct {
	store.Store
	mu   sync.Mutex
	seen map[string][]string
}

func (s *reasonLog) UpdateSandbox(ctx context.Context, id string, fn func(*store.SandboxRecord) error) (*store.SandboxRecord, error) {
	r, err := s.Store.UpdateSandbox(ctx, id, fn)
	if err == nil && r.StateReason != "" {
		s.mu.Lock()
		s.seen[id] = append(s.seen[id], r.StateReason)
		s.mu.Unlock()
	}
	return r, err
}

// fetchShown reports whether sandbox id showed an image's fetch.
func (s *reasonLog) fetchShown(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.seen[id], func(r string) bool { return strings.HasPrefix(r, "fetching image img_") })
}

// TestTemplateSandboxOnAnotherNode: a sandbox of a template built on
// node-1, whose files are at node-1's paths, is cloned from a snapshot and
// restored from another on node-2 (which never sees node-1's files): the
// images name their template, and node-2 starts them on its own copy of
// it (its kernel, and the base disk the fetched layer stands on). Each
// sandbox started from a fetched image shows the fetch in its
// state_reason: both clones, and the restored sandbox.
func TestTemplateSandboxOnAnotherNode(t *testing.T) {
	ctx := context.Background()
	b, err := folder.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	shared := imagestore.New(b, imagestore.Options{})
	remote := func(o *Options) {
		o.ImageStore = &images.Remote{Store: shared, ShmDir: o.ShmDir, WaitDurable: 5 * time.Second}
	}
	one := newHarness(t, remote)
	log := &reasonLog{Store: one.st, seen: map[string][]string{}}
	two := newHarness(t, remote, func(o *Options) { o.ID, o.Store = "node-2", log })

	art := t.TempDir()
	tpl := sandbox.Template{ID: "tpl_built", Name: "built", Host: "node-1", Hash: "h-1",
		Kernel: filepath.Join(art, "vmlinuz"), BaseDisk: filepath.Join(art, "base.img")}
	for _, f := range []string{tpl.Kernel, tpl.BaseDisk} {
		if err := os.WriteFile(f, []byte("built on node-1"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	one.tpl.set(tpl)
	two.tpl.set(tpl)
	one.n.PublishTemplate(tpl)
	until(t, func() bool { ok, err := shared.Durable(ctx, templateImage(tpl)); return err == nil && ok })

	p := one.create("p", sandbox.StateRunning)
	forClones, forRestore := one.snapshot(p.ID, "clones"), one.snapshot(p.ID, "restore")
	for _, s := range []*store.SnapshotRecord{forClones, forRestore} {
		if err := one.n.images.WaitUploaded(ctx, s.Image); err != nil {
			t.Fatal(err)
		}
	}
	// node-1 is another host: node-2 has none of its files.
	if err := os.RemoveAll(art); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(two.opts.DataDir, templateCacheDir, tpl.ID)
	onTwo := func(r *store.SandboxRecord) {
		t.Helper()
		if r.Host != "node-2" || r.Kernel != filepath.Join(cache, tplKernel) {
			t.Errorf("sandbox %s runs on %s with kernel %s, want node-2's copy in %s", r.ID, r.Host, r.Kernel, cache)
		}
		layer := two.n.images.LayerPath(r.Layers[0]) // the bottom of its chain
		if backing, err := two.drv.DiskBacking(layer); err != nil || backing != filepath.Join(cache, tplDisk) {
			t.Errorf("the fetched layer %s stands on %q (%v), want node-2's copy of the template's disk", layer, backing, err)
		}
		if !log.fetchShown(r.ID) {
			t.Errorf("sandbox %s started from a fetched image and showed no fetch: %q", r.ID, log.seen[r.ID])
		}
	}

	kids, err := two.n.CloneSnapshot(ctx, forClones.ID, []*store.SandboxRecord{{}, {}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		onTwo(two.settle(k.ID, sandbox.StateRunning))
	}

	if _, _, err := two.n.Restore(ctx, forRestore.ID); err != nil {
		t.Fatal(err)
	}
	onTwo(two.settle(p.ID, sandbox.StateRunning))
}
