package nodestore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Private is what a node keeps of one sandbox beside the shared row: what
// finds and runs its VM here, and nothing another host could use (the
// guest's MAC is the sandbox's, wherever it runs: it is in the row).
type Private struct {
	Handle     json.RawMessage `json:"handle,omitempty"`
	Disk       string          `json:"disk,omitempty"`
	DiskBase   string          `json:"disk_base,omitempty"`
	Kernel     string          `json:"kernel,omitempty"`
	Initrd     string          `json:"initrd,omitempty"`
	KernelArgs string          `json:"kernel_args,omitempty"`
	Pristine   bool            `json:"pristine,omitempty"`
	Gen        int             `json:"gen,omitempty"`
	NetKept    bool            `json:"net_kept,omitempty"`
}

// PrivateOf is r's private part.
func PrivateOf(r *store.SandboxRecord) Private {
	return Private{Handle: r.Handle, Disk: r.Disk, DiskBase: r.DiskBase, Kernel: r.Kernel, Initrd: r.Initrd,
		KernelArgs: r.KernelArgs, Pristine: r.Pristine, Gen: r.Gen, NetKept: r.NetKept}
}

func (p Private) into(r *store.SandboxRecord) {
	r.Handle, r.Disk, r.DiskBase = p.Handle, p.Disk, p.DiskBase
	r.Kernel, r.Initrd, r.KernelArgs = p.Kernel, p.Initrd, p.KernelArgs
	r.Pristine, r.Gen, r.NetKept = p.Pristine, p.Gen, p.NetKept
}

// templatePaths is what a node keeps of a template it holds: its files
// here (the kernel's command line is shared: a node that fetches the
// files boots them with it).
type templatePaths struct {
	Key      string `json:"key"`
	Kernel   string `json:"kernel,omitempty"`
	Initrd   string `json:"initrd,omitempty"`
	BaseDisk string `json:"base_disk,omitempty"`
	Dir      string `json:"dir,omitempty"`
}

// Local is the node's own part of its records: one JSON file per sandbox
// (dir/sandboxes/<id>.json) and per template it holds
// (dir/templates/<sha256 of its key>.json), each written whole to a
// temporary file, synced and renamed over the old one, and read into
// memory at start.
type Local struct {
	dir       string
	mu        sync.Mutex
	sandboxes map[string]Private
	templates map[string]templatePaths
}

// OpenLocal reads the private state kept under dir.
func OpenLocal(dir string) (*Local, error) {
	l := &Local{dir: dir, sandboxes: map[string]Private{}, templates: map[string]templatePaths{}}
	for _, sub := range []string{"sandboxes", "templates"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, err
		}
	}
	if err := readAll(filepath.Join(dir, "sandboxes"), func(name string, b []byte) error {
		var p Private
		if err := json.Unmarshal(b, &p); err != nil {
			return err
		}
		l.sandboxes[strings.TrimSuffix(name, ".json")] = p
		return nil
	}); err != nil {
		return nil, err
	}
	if err := readAll(filepath.Join(dir, "templates"), func(_ string, b []byte) error {
		var t templatePaths
		if err := json.Unmarshal(b, &t); err != nil {
			return err
		}
		l.templates[t.Key] = t
		return nil
	}); err != nil {
		return nil, err
	}
	return l, nil
}

func readAll(dir string, f func(name string, b []byte) error) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue // a temporary file a crash left
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		if err := f(e.Name(), b); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(dir, e.Name()), err)
		}
	}
	return nil
}

// writeFile replaces path with v, atomically.
func writeFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// merge fills r's private fields from what this node keeps of it.
func (l *Local) merge(r *store.SandboxRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.sandboxes[r.ID]; ok {
		p.into(r)
	}
}

// Sandbox is the private state kept of sandbox id (false: none).
func (l *Local) Sandbox(id string) (Private, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.sandboxes[id]
	return p, ok
}

// save keeps r's private part, when it changed, and drops it once r is
// destroyed.
func (l *Local) save(r *store.SandboxRecord) error {
	if err := sandbox.CheckID(sandbox.PrefixSandbox, r.ID); err != nil {
		return err // it names a file here
	}
	p := PrivateOf(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !r.State.Live() {
		// Its VM and files are gone: nothing here finds them again.
		delete(l.sandboxes, r.ID)
		if err := os.Remove(filepath.Join(l.dir, "sandboxes", r.ID+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if old, ok := l.sandboxes[r.ID]; ok && samePrivate(old, p) {
		return nil
	}
	if err := writeFile(filepath.Join(l.dir, "sandboxes", r.ID+".json"), p); err != nil {
		return fmt.Errorf("keep the private state of sandbox %s: %w", r.ID, err)
	}
	l.sandboxes[r.ID] = p
	return nil
}

func samePrivate(a, b Private) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func templateFile(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:]) + ".json"
}

func (l *Local) mergeTemplate(t *sandbox.Template) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.templates[t.Key()]; ok {
		t.Kernel, t.Initrd, t.BaseDisk, t.Dir = p.Kernel, p.Initrd, p.BaseDisk, p.Dir
	}
}

func (l *Local) saveTemplate(t sandbox.Template) error {
	p := templatePaths{Key: t.Key(), Kernel: t.Kernel, Initrd: t.Initrd, BaseDisk: t.BaseDisk, Dir: t.Dir}
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.templates[p.Key]; ok && old == p {
		return nil
	}
	if err := writeFile(filepath.Join(l.dir, "templates", templateFile(p.Key)), p); err != nil {
		return fmt.Errorf("keep the paths of template %s: %w", p.Key, err)
	}
	l.templates[p.Key] = p
	return nil
}

func (l *Local) dropTemplate(key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.templates, key)
	if err := os.Remove(filepath.Join(l.dir, "templates", templateFile(key))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
