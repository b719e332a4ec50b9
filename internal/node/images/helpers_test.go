package images

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/vmm"
)

// fakeDriver names disks like QEMU's and discards an image's memory and
// state as the real driver does: by removing their files.
type fakeDriver struct{}

func (fakeDriver) DiskFile(base string) string { return base + ".qcow2" }
func (fakeDriver) DiscardImage(_ string, img *vmm.Image) error {
	if img != nil {
		os.Remove(img.MemFile)
		os.Remove(img.StateFile)
	}
	return nil
}

// A fake disk layer's first line names its backing file ("overlay of X").
func (fakeDriver) DiskBacking(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimPrefix(first, "overlay of "), nil
}

func (fakeDriver) Relink(_ context.Context, path, backing string) error {
	os.Chmod(path, 0o600)
	return os.WriteFile(path, []byte("overlay of "+backing+"\n"), 0o600)
}

// fakeRefs are referrers whose answers a test sets; during, if set, runs
// while Roots reads (a release racing a collection).
type fakeRefs struct {
	mu     sync.Mutex
	whole  []string
	layers []string
	mapped map[string]bool
	during func()
}

func (f *fakeRefs) Roots(context.Context) (Roots, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := NewRoots()
	for _, id := range f.whole {
		r.Whole[id] = true
	}
	for _, id := range f.layers {
		r.Layers[id] = true
	}
	if f.during != nil {
		f.during()
	}
	return r, nil
}

func (f *fakeRefs) Mapped(context.Context) (map[string]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mapped, nil
}

// rig is a store over temp dirs: data for image folders, shm for RAM.
type rig struct {
	t    *testing.T
	ctx  context.Context
	s    *Store
	refs *fakeRefs
	opts Options
	shm  string
}

func newRig(t *testing.T, tiers ...Tier) *rig {
	refs := &fakeRefs{}
	r := &rig{t: t, ctx: context.Background(), refs: refs, shm: t.TempDir()}
	r.opts = Options{Dir: filepath.Join(t.TempDir(), "images"), Driver: fakeDriver{}, Referrers: refs, Host: "node-1",
		Tiers: tiers, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	r.s = New(r.opts)
	return r
}

// crash replaces the store with a new one over the same folders: every
// lease is gone, as after zeishd died.
func (r *rig) crash() { r.s = New(r.opts) }

// image makes a complete image (memory in shm, state and a layer in its
// folder) on layers, and releases its lease.
func (r *rig) image(layers ...string) *Meta {
	r.t.Helper()
	id, dir, lease, err := r.s.Create()
	if err != nil {
		r.t.Fatal(err)
	}
	defer lease.Release()
	m := &Meta{ID: id, VM: &vmm.Image{Dir: dir, MemFile: filepath.Join(r.shm, id+".mem"),
		StateFile: filepath.Join(dir, "state"), MemoryMiB: 64}, Disk: r.s.LayerPath(id), Layers: layers, CreatedAt: time.Now().UTC()}
	for _, f := range []string{m.VM.MemFile, m.VM.StateFile, m.Disk} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			r.t.Fatal(err)
		}
	}
	if err := r.s.Write(m); err != nil {
		r.t.Fatal(err)
	}
	return m
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }
