package merge

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/vmm"
)

// fakeDriver writes a layer as one line naming what it is backed by, as
// vmmfake does; failTop makes a merge of that layer fail.
type fakeDriver struct {
	mu      sync.Mutex
	tries   int // merges asked for
	merges  int // merges made
	failTop string
}

func (d *fakeDriver) DiskFile(base string) string           { return base + ".qcow2" }
func (d *fakeDriver) DiscardImage(string, *vmm.Image) error { return nil }
func (d *fakeDriver) DiskBacking(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(strings.TrimSpace(string(b)), "backed by "), nil
}
func (d *fakeDriver) Relink(_ context.Context, path, backing string) error {
	return os.WriteFile(path, []byte("backed by "+backing), 0o600)
}
func (d *fakeDriver) MergeLayers(_ context.Context, top, base, out string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tries++
	if strings.Contains(top, d.failTop) && d.failTop != "" {
		return errors.New("merge broke")
	}
	d.merges++
	return os.WriteFile(out, []byte("backed by "+base+"\n"), 0o400)
}

// fakeSandboxes are running sandboxes by their layers; Rebase moves one
// onto the merge as the node does.
type fakeSandboxes struct {
	mu      sync.Mutex
	layers  map[string][]string
	rebases []string // "id: top → merged"
}

func (f *fakeSandboxes) Layers(_ context.Context, id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.layers[id]
}

func (f *fakeSandboxes) Rebase(_ context.Context, id, top, merged string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rebases = append(f.rebases, id+": "+top+" → "+merged)
	f.layers[id] = []string{merged}
	return nil
}

// Roots keeps every layer a sandbox stands on (images.Referrers).
func (f *fakeSandboxes) Roots(context.Context) (images.Roots, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := images.NewRoots()
	for _, l := range f.layers {
		for _, id := range l {
			r.Layers[id] = true
		}
	}
	return r, nil
}

func (f *fakeSandboxes) Mapped(context.Context) (map[string]bool, error) { return nil, nil }

// rig is a merger over a real image store with a chain of layers on a
// template disk.
type rig struct {
	t   *testing.T
	ctx context.Context
	m   *Merger
	img *images.Store
	drv *fakeDriver
	sbx *fakeSandboxes
	opt Options
}

func newRig(t *testing.T, max int) *rig {
	sbx := &fakeSandboxes{layers: map[string][]string{}}
	drv := &fakeDriver{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	img := images.New(images.Options{Dir: filepath.Join(t.TempDir(), "images"), Driver: drv, Referrers: sbx, Logger: log})
	opt := Options{MaxLayers: max, Images: img, Driver: drv, Sandboxes: sbx, Logger: log}
	return &rig{t: t, ctx: context.Background(), m: New(opt), img: img, drv: drv, sbx: sbx, opt: opt}
}

// chain makes n layers, each backed by the one before, the first by the
// template's disk.
func (r *rig) chain(n int) []string {
	r.t.Helper()
	var ids []string
	backing := "/templates/base.img"
	for range n {
		id, dir, lease, err := r.img.Create()
		if err != nil {
			r.t.Fatal(err)
		}
		defer lease.Release()
		m := &images.Meta{ID: id, Disk: r.img.LayerPath(id), Layers: slices.Clone(ids), CreatedAt: time.Now()}
		if err := os.WriteFile(m.Disk, []byte("backed by "+backing+"\n"), 0o400); err != nil {
			r.t.Fatal(err)
		}
		if err := r.img.Write(m); err != nil {
			r.t.Fatal(err)
		}
		_ = dir
		ids, backing = append(ids, id), m.Disk
	}
	return ids
}

// TestMerge: who gets a merge and onto what.
func TestMerge(t *testing.T) {
	tests := []struct {
		name    string
		max     int
		layers  int
		sibling bool // a second sandbox on the same chain
		want    int  // merges made
		rebased int
	}{
		{"off", 0, 5, false, 0, 0},
		{"within the bound", 3, 3, false, 0, 0},
		{"over the bound", 3, 4, false, 1, 1},
		{"siblings share one merge", 1, 2, true, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, tt.max)
			chain := r.chain(tt.layers)
			ids := []string{"sbx_a"}
			if tt.sibling {
				ids = append(ids, "sbx_b")
			}
			for _, id := range ids {
				r.sbx.layers[id] = slices.Clone(chain)
				r.m.Queue(id, len(chain))
			}
			r.m.drain(r.ctx)
			if r.drv.merges != tt.want || len(r.sbx.rebases) != tt.rebased {
				t.Fatalf("%d merges, rebases %q; want %d and %d", r.drv.merges, r.sbx.rebases, tt.want, tt.rebased)
			}
			for _, id := range ids[:tt.rebased] {
				merged := r.sbx.layers[id][0]
				meta, err := r.img.Read(merged)
				if err != nil || meta.MergedFrom != chain[len(chain)-1] {
					t.Fatalf("%s stands on %s: %+v, %v; want a merge of the top layer", id, merged, meta, err)
				}
				if b, _ := r.drv.DiskBacking(meta.Disk); b != "/templates/base.img" {
					t.Errorf("the merge is backed by %s, want the template's disk", b)
				}
			}
			// The old layers are nobody's now: the round's gc took them.
			if tt.rebased > 0 {
				for _, l := range chain {
					if _, err := os.Stat(r.img.Dir(l)); !os.IsNotExist(err) {
						t.Errorf("layer %s left after every sandbox moved onto the merge", l)
					}
				}
			}
		})
	}
}

// A restarted node (a new merger over the same images) finds the merge
// the old one made instead of merging again; a crash that cut a rebase
// short (the sandbox's top is the merge itself) is finished onto it.
func TestMergeAcrossARestart(t *testing.T) {
	r := newRig(t, 1)
	chain := r.chain(2)
	r.sbx.layers["sbx_a"] = slices.Clone(chain)
	r.m.Queue("sbx_a", 2)
	r.m.drain(r.ctx)
	merged := r.sbx.layers["sbx_a"][0]

	r.m = New(r.opt)
	r.sbx.layers["sbx_b"] = slices.Clone(chain)   // a sibling still on the chain
	r.sbx.layers["sbx_a"] = append(chain, merged) // the record's first write only
	r.m.Queue("sbx_b", 2)
	r.m.Queue("sbx_a", 3)
	r.m.drain(r.ctx)
	if r.drv.merges != 1 {
		t.Fatalf("%d merges, want the first one only", r.drv.merges)
	}
	for _, id := range []string{"sbx_a", "sbx_b"} {
		if l := r.sbx.layers[id]; len(l) != 1 || l[0] != merged {
			t.Errorf("%s stands on %v, want the merge %s", id, l, merged)
		}
	}
}

// A merge that failed is not tried again for the same top layer (each try
// reads and writes whole layers), but is once the sandbox stands on
// another; the failed merge leaves no image behind.
func TestMergeFailureIsNotRetried(t *testing.T) {
	r := newRig(t, 1)
	chain := r.chain(3)
	r.drv.failTop = chain[1]
	r.sbx.layers["sbx_stopped"] = slices.Clone(chain) // keeps the chain; never queued
	r.sbx.layers["sbx_a"] = slices.Clone(chain[:2])
	for range 2 {
		r.m.Queue("sbx_a", 2)
		r.m.drain(r.ctx)
	}
	if r.drv.tries != 1 || len(r.sbx.rebases) != 0 {
		t.Fatalf("%d merges tried, rebases %q; want one try and no rebase", r.drv.tries, r.sbx.rebases)
	}
	if all := r.img.All(); len(all) != 3 {
		t.Fatalf("%d images after a failed merge, want the chain's 3", len(all))
	}
	r.sbx.layers["sbx_a"] = slices.Clone(chain)
	r.m.Queue("sbx_a", 3)
	r.m.drain(r.ctx)
	if r.drv.merges != 1 || len(r.sbx.rebases) != 1 {
		t.Fatalf("on a new top: %d merges, rebases %q; want 1 and 1", r.drv.merges, r.sbx.rebases)
	}
}
