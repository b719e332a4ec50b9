package images

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/blob"
	"github.com/zeish/zeish/internal/imagestore/blob/folder"
	"github.com/zeish/zeish/vmm"
)

// sharedRig is a node's store on a shared image store (a folder).
func sharedRig(t *testing.T, shared *imagestore.Store) *rig {
	r := newRig(t)
	r.opts.Remote = &Remote{Store: shared, ShmDir: r.shm, WaitDurable: time.Second}
	r.s = New(r.opts)
	return r
}

// folderStore is an image store in a temp folder.
func folderStore(t *testing.T) *imagestore.Store {
	b, err := folder.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return imagestore.New(b, imagestore.Options{})
}

// portableImage makes a complete image whose disk is backed by backing.
func (r *rig) portableImage(backing string, mem []byte, layers ...string) *Meta {
	r.t.Helper()
	id, dir, lease, err := r.s.Create()
	if err != nil {
		r.t.Fatal(err)
	}
	defer lease.Release()
	m := &Meta{ID: id, SandboxID: "sb_x", VM: &vmm.Image{Dir: dir, MemFile: filepath.Join(r.shm, "zeish-img-"+id+".mem"),
		StateFile: filepath.Join(dir, "state.bin"), MemoryMiB: 64}, Disk: r.s.LayerPath(id), Layers: layers, CreatedAt: time.Now().UTC()}
	for f, b := range map[string][]byte{m.VM.MemFile: mem, m.VM.StateFile: []byte("state of " + id), m.Disk: []byte("overlay of " + backing + "\n")} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			r.t.Fatal(err)
		}
	}
	if err := r.s.Write(m); err != nil {
		r.t.Fatal(err)
	}
	return m
}

// TestImagesTravelThroughTheStore: an image made on one node, and a child
// of it, are uploaded in the background (the child as a delta), and a node
// that never had them fetches the child whole with its parent's layer, its
// disk naming that node's copy of the layer below; gc on either node
// removes its own copy once no record needs it, never the store's (the
// control plane's sweep deletes from the store).
func TestImagesTravelThroughTheStore(t *testing.T) {
	ctx := context.Background()
	shared := folderStore(t)
	a, c := sharedRig(t, shared), sharedRig(t, shared)
	base := filepath.Join(t.TempDir(), "base.img")
	os.WriteFile(base, []byte("a template's disk"), 0o600)

	mem := make([]byte, 4<<20)
	rand.Read(mem)
	parent := a.portableImage(base, mem)
	childMem := bytes.Clone(mem)
	copy(childMem[8192:], bytes.Repeat([]byte{7}, 4096)) // one private page
	child := a.portableImage(a.s.LayerPath(parent.ID), childMem, parent.ID)

	a.s.Publish(parent)
	if err := a.s.WaitUploaded(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	a.s.Publish(child)
	if err := a.s.WaitUploaded(ctx, child.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return a.s.Durable(child.ID) && a.s.Durable(parent.ID) })

	var last [2]int64
	got, err := c.s.Fetch(ctx, child.ID, false, func(done, total int64) { last = [2]int64{done, total} })
	if err != nil {
		t.Fatal(err)
	}
	if done, total := last[0], last[1]; done != total || total < int64(len(mem)) {
		t.Errorf("progress ended at %v, want all of at least %d bytes", last, len(mem))
	}
	if b, _ := os.ReadFile(got.VM.MemFile); !bytes.Equal(b, childMem) {
		t.Error("the fetched child's memory differs from the original")
	}
	if b, _ := (fakeDriver{}).DiskBacking(got.Disk); b != c.s.LayerPath(parent.ID) {
		t.Errorf("the fetched child's disk names %q, want this node's copy of its parent's layer %q", b, c.s.LayerPath(parent.ID))
	}
	if b, _ := (fakeDriver{}).DiskBacking(c.s.LayerPath(parent.ID)); b != base {
		t.Errorf("the parent's layer names %q, want the template's disk %q", b, base)
	}
	if pm, _ := c.s.Read(parent.ID); pm == nil || pm.VM != nil {
		t.Errorf("the parent was wanted for its layer only: %+v", pm)
	}
	if !c.s.Durable(child.ID) {
		t.Error("a fetched image is durable")
	}

	// Needed by a record: gc keeps it in the store.
	c.refs.whole, c.refs.layers = []string{child.ID}, []string{parent.ID}
	c.s.Collect(ctx)
	if ok, _ := shared.Durable(ctx, child.ID); !ok {
		t.Fatal("gc deleted an image a record needs from the store")
	}
	// Needed by none of this node's records: its copy goes, the store's
	// stays for the control plane's sweep, which alone sees every node's
	// claims (another node may be fetching it right now).
	c.refs.whole, c.refs.layers = nil, nil
	c.s.Collect(ctx)
	for _, id := range []string{child.ID, parent.ID} {
		if ok, _ := shared.Durable(ctx, id); !ok {
			t.Errorf("a node's gc deleted image %s from the shared store: only the sweep may", id)
		}
		if exists(c.s.Dir(id)) {
			t.Errorf("image %s is still on the fetching node", id)
		}
	}
	a.s.Collect(ctx)
	if exists(a.s.Dir(child.ID)) {
		t.Error("the maker kept an image nothing needs")
	}
	if ok, _ := shared.Durable(ctx, child.ID); !ok {
		t.Error("the maker's gc deleted the image from the shared store: only the sweep may")
	}
}

// TestFetchOfAnImageNotInTheStore says which host lacks it and why.
func TestFetchOfAnImageNotInTheStore(t *testing.T) {
	b, _ := folder.New(t.TempDir())
	r := sharedRig(t, imagestore.New(b, imagestore.Options{}))
	_, err := r.s.Fetch(context.Background(), "img_nothere", false, nil)
	if !errdefs.Is(err, errdefs.ClassNotFound) {
		t.Fatalf("fetch of an image never uploaded: %v, want not found", err)
	}
	if exists(r.s.Dir("img_nothere")) {
		t.Error("a failed fetch left a folder")
	}
	local := newRig(t)
	if _, err := local.s.Fetch(context.Background(), "img_nothere", false, nil); !errdefs.Is(err, errdefs.ClassNotFound) {
		t.Fatalf("fetch without a store: %v", err)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// awayBackend is a folder store that can be switched off: while down,
// every call fails as an unreachable S3 server's does.
type awayBackend struct {
	blob.Backend
	down atomic.Bool
}

func (b *awayBackend) err() error {
	if b.down.Load() {
		return blob.Errorf(blob.ErrUnreachable, "%s: connection refused", b)
	}
	return nil
}

func (b *awayBackend) Put(ctx context.Context, key string, body []byte, sum [sha256.Size]byte) error {
	if err := b.err(); err != nil {
		return err
	}
	return b.Backend.Put(ctx, key, body, sum)
}

func (b *awayBackend) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := b.err(); err != nil {
		return nil, err
	}
	return b.Backend.Get(ctx, key, off, n)
}

func (b *awayBackend) Stat(ctx context.Context, key string) (blob.Info, error) {
	if err := b.err(); err != nil {
		return blob.Info{}, err
	}
	return b.Backend.Stat(ctx, key)
}

func (b *awayBackend) List(ctx context.Context, prefix string, fn func(blob.Info) error) error {
	if err := b.err(); err != nil {
		return err
	}
	return b.Backend.List(ctx, prefix, fn)
}

// TestUploadCatchesUpWhenTheStoreIsBack: an image made while the store
// is away is not durable; once the store is back, the node's retry
// uploads it and marks it durable, with nothing asked of the caller. An
// image deleted meanwhile is not retried.
func TestUploadCatchesUpWhenTheStoreIsBack(t *testing.T) {
	dir := t.TempDir()
	f, err := folder.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	b := &awayBackend{Backend: f}
	shared := imagestore.New(b, imagestore.Options{})
	r := sharedRig(t, shared)
	base := filepath.Join(t.TempDir(), "base.img")
	os.WriteFile(base, []byte("a template's disk"), 0o600)

	b.down.Store(true)
	kept := r.portableImage(base, bytes.Repeat([]byte{1}, 1<<20))
	gone := r.portableImage(base, bytes.Repeat([]byte{2}, 1<<20))
	r.s.Publish(kept)
	r.s.Publish(gone)
	time.Sleep(1500 * time.Millisecond) // the first tries fail
	if r.s.Durable(kept.ID) {
		t.Fatal("durable while the store was away")
	}
	os.RemoveAll(r.s.Dir(gone.ID)) // deleted while the store was away
	b.down.Store(false)
	waitFor(t, func() bool { return r.s.Durable(kept.ID) })
	if ok, err := shared.Durable(context.Background(), kept.ID); !ok || err != nil {
		t.Fatalf("the store after the retry: durable %v, %v", ok, err)
	}
	if ok, _ := shared.Durable(context.Background(), gone.ID); ok {
		t.Fatal("an image deleted while the store was away was uploaded")
	}
}

// countingBackend counts the chunk bytes put into a folder store.
type countingBackend struct {
	blob.Backend
	chunkBytes atomic.Int64
}

func (b *countingBackend) Put(ctx context.Context, key string, body []byte, sum [sha256.Size]byte) error {
	if strings.HasPrefix(key, "chunks/") {
		b.chunkBytes.Add(int64(len(body)))
	}
	return b.Backend.Put(ctx, key, body, sum)
}

// TestUploadAfterAMergeIsADelta: a VM whose disk chain was merged
// (internal/node/merge: a layer without memory below its disk, merged
// from the image its RAM came from) is captured: its image is uploaded as
// a delta of that image, its private pages only, not all of its RAM.
func TestUploadAfterAMergeIsADelta(t *testing.T) {
	ctx := context.Background()
	f, err := folder.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &countingBackend{Backend: f}
	r := sharedRig(t, imagestore.New(b, imagestore.Options{}))
	base := filepath.Join(t.TempDir(), "base.img")
	os.WriteFile(base, []byte("a template's disk"), 0o600)
	mem := make([]byte, 4<<20)
	rand.Read(mem)
	origin := r.portableImage(base, mem)
	r.s.Publish(origin)
	if err := r.s.WaitUploaded(ctx, origin.ID); err != nil {
		t.Fatal(err)
	}
	// The merge of the chain that origin topped: a disk only.
	id, _, lease, err := r.s.Create()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()
	merged := &Meta{ID: id, SandboxID: "sb_x", Disk: r.s.LayerPath(id), MergedFrom: origin.ID, CreatedAt: time.Now().UTC()}
	if err := os.WriteFile(merged.Disk, []byte("merged over "+base+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Write(merged); err != nil {
		t.Fatal(err)
	}
	childMem := bytes.Clone(mem)
	copy(childMem[8192:], bytes.Repeat([]byte{7}, 4096)) // one private page
	child := r.portableImage(r.s.LayerPath(merged.ID), childMem, merged.ID)
	before := b.chunkBytes.Load()
	r.s.Publish(child)
	if err := r.s.WaitUploaded(ctx, child.ID); err != nil {
		t.Fatal(err)
	}
	if up := b.chunkBytes.Load() - before; up > 64<<10 {
		t.Errorf("the capture after a merge put %d KiB of chunks, want its private page and its small files (its RAM is %d KiB)", up>>10, len(mem)>>10)
	}
}

// fakeTemplates keep each template's base disk at a path of their node's.
type fakeTemplates map[string][2]string // key → {disk, hash}

func (f fakeTemplates) Hash(_ context.Context, key string) (string, error) {
	if t, ok := f[key]; ok {
		return t[1], nil
	}
	return "", errdefs.ErrNotFound
}

func (f fakeTemplates) Disk(_ context.Context, key string) (string, string, error) {
	if t, ok := f[key]; ok {
		return t[0], t[1], nil
	}
	return "", "", errdefs.ErrNotFound
}

// TestAnImageStandsOnTheFetchingNodesTemplate: an image at the bottom of
// a chain (its disk on a template's base disk) names its template, and
// the node that fetches it makes its layer stand on that node's own copy
// of the template, at another path than its maker's; a copy of another
// hash is refused, with nothing left behind; an older image, which names
// no template, stands on the path its maker recorded.
func TestAnImageStandsOnTheFetchingNodesTemplate(t *testing.T) {
	ctx := context.Background()
	shared := folderStore(t)
	disk := func(name string) string {
		p := filepath.Join(t.TempDir(), name)
		os.WriteFile(p, []byte("a template's disk"), 0o600)
		return p
	}
	onA, onC := disk("built-on-a.img"), disk("cached-on-c.img")
	a := sharedRig(t, shared)
	a.opts.Templates = fakeTemplates{"tpl_1": {onA, "h1"}}
	a.s = New(a.opts)
	publish := func(template string) *Meta {
		m := a.portableImage(onA, []byte("memory"))
		m.Template = template
		if err := a.s.Write(m); err != nil {
			t.Fatal(err)
		}
		a.s.Publish(m)
		if err := a.s.WaitUploaded(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
		return m
	}
	named, older := publish("tpl_1"), publish("")

	for _, tc := range []struct {
		name      string
		templates fakeTemplates
		image     *Meta
		want      string // the fetched layer's backing; "": refused
	}{
		{"this node's copy of the template", fakeTemplates{"tpl_1": {onC, "h1"}}, named, onC},
		{"a copy of another hash", fakeTemplates{"tpl_1": {onC, "h2"}}, named, ""},
		{"a template this node cannot find", fakeTemplates{}, named, ""},
		{"an older image: its maker's path", fakeTemplates{"tpl_1": {onC, "h1"}}, older, onA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sharedRig(t, shared)
			c.opts.Templates = tc.templates
			c.s = New(c.opts)
			got, err := c.s.Fetch(ctx, tc.image.ID, false, nil)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("fetched %+v, want a refusal", got)
				}
				if exists(c.s.Dir(tc.image.ID)) {
					t.Error("a refused fetch left the image's folder")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := (fakeDriver{}).DiskBacking(got.Disk); b != tc.want {
				t.Errorf("the fetched layer stands on %q, want %q", b, tc.want)
			}
			if got.Template != tc.image.Template {
				t.Errorf("the fetched image names template %q, want %q", got.Template, tc.image.Template)
			}
		})
	}
}
