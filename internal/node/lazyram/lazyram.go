// Package lazyram starts VMs on images whose RAM this node has not
// fetched. A remote start (a fork child, a clone, a restore or a start of
// an image another node made) fetches the image's disk layers and device
// state as before, but its RAM file in tmpfs is first a symlink to the
// same file served lazily from the image store by internal/imagefs: the VM
// starts at once, and pages arrive when the guest touches them. In the
// background the whole file is prefetched (into the node's chunk cache,
// then written out to tmpfs and swapped in for the symlink), so the image
// ends up local like one fetched whole, and later starts of it map tmpfs.
// The mount goes once no VM maps a served file any more; its chunk cache
// goes with it. docs/images.md ("Lazy RAM on remote starts") says how it
// fits, and what a node restart does to it.
package lazyram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/blob"
)

// Options configure a RAM.
type Options struct {
	// Dir is its folder (<data>/lazyram): the mount point, the served
	// images, the imagefs catalog and the chunk cache.
	Dir string
	// Backend is the image store's.
	Backend blob.Backend
	// Holder names this node in the store's read leases.
	Holder string
	// CacheBytes bounds the chunk cache (default 8 GiB).
	CacheBytes int64
	// SweepEvery is how often images nothing maps are retired (default 5 s).
	SweepEvery time.Duration
	// Grace keeps an image served this long after its RAM became local,
	// for a start that resolved the symlink just before the swap and has
	// yet to map the file (QEMU maps it right after it opens it; default 5 s).
	Grace  time.Duration
	Logger *slog.Logger
}

// RAM serves images' RAM files lazily on one node.
type RAM struct {
	o       Options
	log     *slog.Logger
	metrics *Metrics
	life    context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup

	mu     sync.Mutex
	sess   *session // nil: not mounted
	served map[string]*served
}

// served is one image whose RAM file the node serves.
type served struct {
	Manifest *imagestore.Manifest `json:"manifest"`
	Name     string               `json:"name"`  // the file of the image served
	Local    string               `json:"local"` // the tmpfs path: a symlink until the prefetch ends
	localAt  atomic.Int64         // when it became a regular file, unix ns (0: not yet)
	cancel   context.CancelFunc   // the prefetch's (nil: none runs)
	done     chan struct{}        // closed when the prefetch has returned
}

// Open checks the node can mount FUSE (root, /dev/fuse) and takes over
// what a previous zeishd left in o.Dir: the mount and its server's
// connection, kept open by a keeper process, or, without one, a new
// mount serving the same images (VMs that mapped the old one fault on
// the pages they had not read yet). An error says why lazy RAM cannot run
// here; the caller fetches RAM whole then.
func Open(o Options) (*RAM, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = 8 << 30
	}
	if o.SweepEvery <= 0 {
		o.SweepEvery = 5 * time.Second
	}
	if o.Grace <= 0 {
		o.Grace = 5 * time.Second
	}
	if err := Available(); err != nil {
		return nil, err
	}
	// Not the mount point: a mount left by a zeishd that died answers
	// nothing until it is served again.
	if err := os.MkdirAll(servedDir(o.Dir), 0o700); err != nil {
		return nil, fmt.Errorf("lazy RAM: %w", err)
	}
	life, stop := context.WithCancel(context.Background())
	r := &RAM{o: o, log: o.Logger, metrics: newMetrics(), life: life, stop: stop, served: map[string]*served{}}
	if err := r.recover(); err != nil {
		stop()
		return nil, err
	}
	r.wg.Add(1)
	go r.sweepEvery()
	return r, nil
}

// Available says whether this host can serve lazy RAM.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("mounting FUSE needs root")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("no FUSE: %w", err)
	}
	return f.Close()
}

func mountDir(dir string) string  { return filepath.Join(dir, "mnt") }
func servedDir(dir string) string { return filepath.Join(dir, "served") }
func stateDir(dir string) string  { return filepath.Join(dir, "state") }
func cacheDir(dir string) string  { return filepath.Join(dir, "cache") }

// Mount is where the served files appear.
func (r *RAM) Mount() string { return mountDir(r.o.Dir) }

// Metrics are its instruments, for /metrics.
func (r *RAM) Metrics() *Metrics { return r.metrics }

// Map makes local (a RAM file's path in tmpfs, which must not exist yet)
// file name of image man, served lazily: a symlink to the served file,
// replaced by the whole file once the background prefetch has written it.
func (r *RAM) Map(ctx context.Context, man *imagestore.Manifest, name, local string) error {
	if _, ok := man.File(name); !ok {
		return fmt.Errorf("image %s has no file %q", man.ID, name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.life.Err() != nil {
		return errors.New("lazy RAM is closed")
	}
	if s := r.served[man.ID]; s != nil && s.Local != local {
		return fmt.Errorf("image %s is served for %s already", man.ID, s.Local)
	}
	sess, err := r.session()
	if err != nil {
		return err
	}
	if err := sess.srv.Add(man); err != nil {
		return err
	}
	s := r.served[man.ID]
	if s == nil {
		s = &served{Manifest: man, Name: name, Local: local, done: closed()}
		b, err := json.Marshal(s)
		if err != nil {
			return err
		}
		if err := datadir.WriteFile(r.servedFile(man.ID), b); err != nil {
			return err
		}
		r.served[man.ID] = s
		r.metrics.Images.Set(float64(len(r.served)))
	}
	if err := r.link(s); err != nil {
		return err
	}
	s.localAt.Store(0)
	r.metrics.Maps.Inc()
	r.prefetchLocked(s)
	return nil
}

func (r *RAM) servedFile(id string) string { return filepath.Join(servedDir(r.o.Dir), id+".json") }

// fusePath is where s's file appears under the mount.
func (r *RAM) fusePath(s *served) string {
	return filepath.Join(r.Mount(), s.Manifest.ID, s.Name)
}

// link makes s.Local the symlink to its served file, atomically.
func (r *RAM) link(s *served) error {
	target := r.fusePath(s)
	if t, err := os.Readlink(s.Local); err == nil && t == target {
		return nil
	}
	tmp := s.Local + ".lazy-link"
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("lazy RAM: %w", err)
	}
	if err := os.Rename(tmp, s.Local); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("lazy RAM: %w", err)
	}
	return nil
}

// isLink says whether s.Local is still the symlink to its served file.
func (r *RAM) isLink(s *served) bool {
	t, err := os.Readlink(s.Local)
	return err == nil && t == r.fusePath(s)
}

// Close stops the prefetches and the sweeps. The mount stays while an
// image is served (running VMs map it; the keeper process keeps its
// connection open, and the next Open serves it again); with none it goes.
func (r *RAM) Close() {
	r.stop()
	r.wg.Wait()
	// The node is closed: no start is in flight, so no grace.
	r.sweep(context.Background(), 0)
}

// Served lists the images served now.
func (r *RAM) Served() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.served))
	for id := range r.served {
		out = append(out, id)
	}
	return out
}

// Mapped lists the files under mount that some process maps (a VM's
// RAM), from /proc/*/maps.
func Mapped(mount string) map[string]bool {
	out := map[string]bool{}
	prefix := filepath.Clean(mount) + "/"
	procs, _ := filepath.Glob("/proc/[0-9]*/maps")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), prefix) {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if i := strings.Index(line, prefix); i >= 0 {
				out[strings.TrimSuffix(line[i:], " (deleted)")] = true
			}
		}
	}
	return out
}
