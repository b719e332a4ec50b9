package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/sparsecopy"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// A template built on one node of a cluster (its Host) is usable on every
// node that shares the image store: the node that built it uploads its
// files (PublishTemplate), and another fetches them once, into a cache in
// its data dir with an LRU bound (Options.TemplateCacheMiB), before the
// first create from it. The template's warm machine stays its builder's:
// elsewhere its sandboxes boot cold (warmImage finds no image there).

// templateImage is the id a template's files have in the image store.
func templateImage(t sandbox.Template) string { return imagestore.TemplateImage(t.ID) }

const templateCacheDir = "template-cache"

// Files of a template in the store.
const (
	tplKernel = "kernel"
	tplInitrd = "initrd"
	tplDisk   = "disk"
)

// templateMeta is what the store's manifest of a template holds.
type templateMeta struct {
	Template   string `json:"template"`
	Hash       string `json:"hash"`
	KernelArgs string `json:"kernel_args,omitempty"`
}

// PublishTemplate uploads built template t's files to the image store in
// the background (the catalog calls it when a build is ready); nothing
// without a store or for a template this node did not build.
func (n *Node) PublishTemplate(t sandbox.Template) {
	r := n.opts.ImageStore
	if r == nil || t.Host != n.opts.ID || t.BaseDisk == "" {
		return
	}
	meta, _ := json.Marshal(templateMeta{Template: t.ID, Hash: t.Hash, KernelArgs: t.KernelArgs})
	spec := imagestore.UploadSpec{ID: templateImage(t), Meta: meta, Files: []imagestore.SourceFile{
		{Name: tplKernel, Path: t.Kernel}, {Name: tplDisk, Path: t.BaseDisk}}}
	if t.Initrd != "" {
		spec.Files = append(spec.Files, imagestore.SourceFile{Name: tplInitrd, Path: t.Initrd})
	}
	n.uploadTemplate(t, spec, 1)
}

// uploadTemplate runs template t's upload, the attempt-th; one the store
// was away for (imagestore.Transient) is tried again later, while the
// template's files are still here and the node runs.
func (n *Node) uploadTemplate(t sandbox.Template, spec imagestore.UploadSpec, attempt int) {
	up := n.opts.ImageStore.Store.StartUpload(n.life, spec)
	go func() {
		if _, err := up.Wait(); err != nil {
			if !imagestore.Transient(err) || n.life.Err() != nil {
				n.log.Warn("image store: template not uploaded; it is usable on this node only", "template", t.ID, "err", err)
				return
			}
			wait := imagestore.RetryAfter(attempt)
			n.log.Warn("image store: template not uploaded; it is usable on this node only until a retry succeeds",
				"template", t.ID, "retry_in", wait, "err", err)
			time.AfterFunc(wait, func() {
				if _, err := os.Stat(t.BaseDisk); err == nil && n.life.Err() == nil {
					n.uploadTemplate(t, spec, attempt+1)
				}
			})
			return
		}
		p := up.Progress()
		n.log.Info("template durable", "template", t.ID, "uploaded_bytes", p.Uploaded+p.Manifest)
	}()
}

// UnpublishTemplate deletes deleted template t's files from the image
// store (the catalog asks before it removes them here); nothing without a
// store or for a template this node did not build. Nodes that fetched them
// keep their copies until their cache's bound evicts them.
func (n *Node) UnpublishTemplate(ctx context.Context, t sandbox.Template) error {
	r := n.opts.ImageStore
	if r == nil || t.Host != n.opts.ID {
		return nil
	}
	if err := r.Store.Delete(ctx, templateImage(t)); err != nil && !errdefs.Is(err, errdefs.ClassNotFound) {
		return fmt.Errorf("image store: %w", err)
	}
	return nil
}

// heldElsewhere reports whether template t's files are another node's.
func (n *Node) heldElsewhere(t sandbox.Template) bool { return t.Host != "" && t.Host != n.opts.ID }

// templateReady refuses, before a create is recorded, a template held by
// another node that this node cannot fetch: no image store, or not in it.
func (n *Node) templateReady(ctx context.Context, t sandbox.Template) error {
	if !n.heldElsewhere(t) {
		return nil
	}
	if _, err := os.Stat(n.templateCachePath(t)); err == nil {
		return nil
	}
	if n.opts.ImageStore == nil {
		return fmt.Errorf("template %s is held by node %s, and host %s has no image store to fetch it from (ZEISH_IMAGE_STORE): %w",
			t.Name, t.Host, n.opts.ID, errdefs.ErrUnavailable)
	}
	ok, err := n.opts.ImageStore.Store.Durable(ctx, templateImage(t))
	if err != nil {
		return fmt.Errorf("template %s is held by node %s; the image store: %w", t.Name, t.Host, err)
	}
	if !ok {
		return fmt.Errorf("template %s is held by node %s and not in the image store yet: %w", t.Name, t.Host, errdefs.ErrUnavailable)
	}
	return nil
}

// templateCachePath is where this node keeps template t's files.
func (n *Node) templateCachePath(t sandbox.Template) string {
	return filepath.Join(n.opts.DataDir, templateCacheDir, t.ID)
}

// templateFetches runs one fetch per template at a time.
var templateFetches sync.Map // template id → *sync.Mutex

// localTemplate points t at this node's copy of its files, fetching them
// from the image store the first time (sandbox sb shows the progress).
func (n *Node) localTemplate(ctx context.Context, t *sandbox.Template, sb string) error {
	if !n.heldElsewhere(*t) {
		return nil
	}
	mu, _ := templateFetches.LoadOrStore(t.ID, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	dir := n.templateCachePath(*t)
	if _, err := os.Stat(dir); err != nil {
		if err := n.fetchTemplate(ctx, *t, dir, sb); err != nil {
			return err
		}
		n.trimTemplateCache(ctx, t.ID)
	}
	now := time.Now()
	os.Chtimes(dir, now, now) // most recently used
	t.Kernel, t.BaseDisk = filepath.Join(dir, tplKernel), filepath.Join(dir, tplDisk)
	if _, err := os.Stat(filepath.Join(dir, tplInitrd)); err == nil {
		t.Initrd = filepath.Join(dir, tplInitrd)
	} else {
		t.Initrd = ""
	}
	t.Warm = nil // the builder's machine: boot cold here
	return nil
}

func (n *Node) fetchTemplate(ctx context.Context, t sandbox.Template, dir, sb string) error {
	st := n.opts.ImageStore.Store
	began := time.Now()
	man, err := st.Manifest(ctx, templateImage(t))
	if err != nil {
		return fmt.Errorf("template %s (held by node %s): the image store %s: %w", t.Name, t.Host, st, err)
	}
	tmp := dir + ".fetch"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var total, done int64
	for _, f := range man.Files {
		total += f.Size
	}
	progress := n.fetchProgress(ctx, sb, "template "+t.Name)
	for _, f := range man.Files {
		if err := st.FetchFile(ctx, man, f.Name, filepath.Join(tmp, f.Name)); err != nil {
			return fmt.Errorf("template %s: %w", t.Name, err)
		}
		done += f.Size
		if progress != nil {
			progress(done, total)
		}
	}
	// The VMM (confined, as another user) reads these files: world-readable,
	// like a built template's.
	for _, f := range man.Files {
		os.Chmod(filepath.Join(tmp, f.Name), 0o444)
	}
	if err := datadir.SyncDir(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	n.log.Info("template fetched", "template", t.ID, "bytes", total, "ms", time.Since(began).Milliseconds())
	return nil
}

// trimTemplateCache removes the least recently used templates of the
// cache past Options.TemplateCacheMiB, except keep and those a sandbox of
// this node still stands on (its disk is backed by the template's).
func (n *Node) trimTemplateCache(ctx context.Context, keep string) {
	limit := int64(n.opts.TemplateCacheMiB) << 20
	if limit <= 0 {
		return
	}
	root := filepath.Join(n.opts.DataDir, templateCacheDir)
	entries, _ := os.ReadDir(root)
	type cached struct {
		id    string
		bytes int64
		used  time.Time
	}
	var all []cached
	var total int64
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".fetch") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		c := cached{id: e.Name(), used: info.ModTime(), bytes: dirBytes(filepath.Join(root, e.Name()))}
		all = append(all, c)
		total += c.bytes
	}
	if total <= limit {
		return
	}
	inUse := map[string]bool{keep: true}
	rows, err := n.opts.Store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return // unsure what is used: keep everything
	}
	for _, r := range rows {
		if r.Host == n.opts.ID && strings.HasPrefix(r.Kernel, root+string(filepath.Separator)) {
			inUse[filepath.Base(filepath.Dir(r.Kernel))] = true
		}
	}
	slices.SortFunc(all, func(a, b cached) int { return a.used.Compare(b.used) })
	for _, c := range all {
		if total <= limit {
			return
		}
		if inUse[c.id] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(root, c.id)); err == nil {
			total -= c.bytes
			n.log.Info("template cache: evicted", "template", c.id, "bytes", c.bytes)
		}
	}
}

// dirBytes is what the files of dir take on disk.
func dirBytes(dir string) int64 {
	var total int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if b, err := sparsecopy.Allocated(filepath.Join(dir, e.Name())); err == nil && !e.IsDir() {
			total += b
		}
	}
	return total
}

// templateKey is what template t is filed under, as a sandbox's Template
// names it: a built-in's name, an account template's id.
func templateKey(t sandbox.Template) string {
	if t.Builtin {
		return t.Name
	}
	return t.ID
}

// imageTemplates find the template an image fetched from the image store
// stands on, on this node (images.Templates): images name it, since its
// files are at another path on every node.
type imageTemplates struct{ n *Node }

func (it imageTemplates) Hash(ctx context.Context, key string) (string, error) {
	t, err := it.n.opts.Templates.Get(ctx, key)
	return t.Hash, err
}

func (it imageTemplates) Disk(ctx context.Context, key string) (string, string, error) {
	t, err := it.n.opts.Templates.Get(ctx, key)
	if err != nil {
		return "", "", err
	}
	if err := it.n.localTemplate(ctx, &t, ""); err != nil {
		return "", "", err
	}
	return t.BaseDisk, t.Hash, nil
}

// localKernel points r's kernel and initrd at this node's copy of its
// template's (fetched first if need be; sandbox sb shows the progress): a
// sandbox, or a fork's children, that move here from another node carry
// the paths of that node. A record whose template is gone keeps its
// paths if this node has them.
func (n *Node) localKernel(ctx context.Context, r *store.SandboxRecord, sb string) error {
	t, err := n.opts.Templates.Get(ctx, r.Template)
	if err == nil {
		err = n.localTemplate(ctx, &t, sb)
	}
	if err != nil {
		if _, serr := os.Stat(r.Kernel); serr == nil {
			n.log.Warn("template of a sandbox that moved here: keeping its kernel's path", logSandbox, r.ID, "template", r.Template, "err", err)
			return nil
		}
		return fmt.Errorf("template %s of sandbox %s: %w", r.Template, r.ID, err)
	}
	r.Kernel, r.Initrd = t.Kernel, t.Initrd
	if r.KernelArgs == "" { // a node of 2.3 keeps it with the VM's private state: not its old node's
		r.KernelArgs = t.KernelArgs
	}
	return nil
}
