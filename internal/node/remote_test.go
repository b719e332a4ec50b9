package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

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

// TestTemplateSandboxOnAnotherNode: a sandbox is cloned from a snapshot
// and restored from another on node-2 while its record says node-1. Of a
// template built on node-1 (whose files node-2 never sees: node-1 is
// another host), the images name their template and node-2 starts them on
// its own copy of it (its kernel, and the base disk the fetched layer
// stands on); of a built-in, on the paths every node has. Either way each
// sandbox started from a fetched image shows the fetch in its
// state_reason: both clones, and the restored sandbox.
func TestTemplateSandboxOnAnotherNode(t *testing.T) {
	for _, builder := range []string{"node-1", ""} {
		name := "built on " + builder
		if builder == "" {
			name = "built-in"
		}
		t.Run(name, func(t *testing.T) { testOnAnotherNode(t, builder) })
	}
}

// testOnAnotherNode runs TestTemplateSandboxOnAnotherNode for a template
// built on node builder ("": a built-in).
func testOnAnotherNode(t *testing.T, builder string) {
	ctx := context.Background()
	shared, remote := sharedImageStore(t)
	one := newHarness(t, remote)
	log := &reasonLog{Store: one.st, seen: map[string][]string{}}
	two := newHarness(t, remote, func(o *Options) { o.ID, o.Store = "node-2", log })

	art := t.TempDir()
	tpl := sandbox.Template{ID: "tpl_built", Name: "built", Host: builder, Hash: "h-1",
		Kernel: filepath.Join(art, "vmlinuz"), BaseDisk: filepath.Join(art, "base.img")}
	for _, f := range []string{tpl.Kernel, tpl.BaseDisk} {
		if err := os.WriteFile(f, []byte("a template's file"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	one.tpl.set(tpl)
	two.tpl.set(tpl)
	kernel, disk := tpl.Kernel, tpl.BaseDisk // where node-2 finds them
	if builder != "" {
		one.n.PublishTemplate(tpl)
		until(t, func() bool { ok, err := shared.Durable(ctx, templateImage(tpl)); return err == nil && ok })
		cache := filepath.Join(two.opts.DataDir, templateCacheDir, tpl.ID)
		kernel, disk = filepath.Join(cache, tplKernel), filepath.Join(cache, tplDisk)
	}

	p := one.create("p", sandbox.StateRunning)
	forClones, forRestore := one.snapshot(p.ID, "clones"), one.snapshot(p.ID, "restore")
	for _, s := range []*store.SnapshotRecord{forClones, forRestore} {
		if err := one.n.images.WaitUploaded(ctx, s.Image); err != nil {
			t.Fatal(err)
		}
	}
	if builder != "" {
		// node-1 is another host: node-2 has none of its files.
		if err := os.RemoveAll(art); err != nil {
			t.Fatal(err)
		}
	}
	onTwo := func(r *store.SandboxRecord) {
		t.Helper()
		if r.Host != "node-2" || r.Kernel != kernel {
			t.Errorf("sandbox %s runs on %s with kernel %s, want %s", r.ID, r.Host, r.Kernel, kernel)
		}
		layer := two.n.images.LayerPath(r.Layers[0]) // the bottom of its chain
		if backing, err := two.drv.DiskBacking(layer); err != nil || backing != disk {
			t.Errorf("the fetched layer %s stands on %q (%v), want %s", layer, backing, err, disk)
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
