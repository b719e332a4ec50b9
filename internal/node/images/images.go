// Package images keeps a node's images: a sandbox captured at one instant,
// in <data>/images/<id>/: its memory and device state (vmm.Image) and, once
// frozen, its disk as a read-only layer (in the driver's format) that new
// overlays are backed by. Forks, snapshots, stops and warm builds make
// images; many sandboxes and snapshots may use one.
//
// Three jobs, kept apart as containerd keeps leases apart from its gc:
//   - metadata (this file): an image's folder and its image.json;
//   - leases (leases.go): an operation holds an image it needs while no
//     record names it yet (children being started from it, a capture in
//     progress);
//   - collection (gc.go): nothing counts references. gc asks its
//     Referrers which images the records need, adds the leased ones and
//     removes the rest, so a crash can never leak or free one;
//
// and tiers (tier.go, cold.go): an image's RAM lives in the tmpfs every
// guest's RAM lives in, or, once idle, in a tier away from it (the data
// dir's disk; a remote object store is meant to plug in beside it), from
// which it is brought back when a VM is to start from it.
package images

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

const (
	idPrefix = "img_"
	metaFile = "image.json"
	twinFile = "cardless" // in an image's folder: the id of the twin made beside it
)

// Meta is what an image's image.json records.
type Meta struct {
	ID        string     `json:"id"`
	SandboxID string     `json:"sandbox_id"`
	VM        *vmm.Image `json:"vm"`
	// Disk is the frozen layer in the image's folder ("" until frozen);
	// Layers are the images its backing chain goes through.
	Disk   string   `json:"disk,omitempty"`
	Layers []string `json:"layers,omitempty"`
	// MergedFrom is set on a merge of a chain (internal/node/merge): the
	// image whose layer topped it. Such an image has only a disk, backed
	// by the template's.
	MergedFrom string `json:"merged_from,omitempty"`
	// Template is the key the sandbox's template is filed under (a
	// built-in's name, an account template's id): the bottom of the disk
	// chain is its base disk, which each node keeps at a path of its own.
	Template  string    `json:"template,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// Chain is the layers a disk standing on m's layer goes through: m's own
// chain, then m.
func (m *Meta) Chain() []string { return append(append([]string(nil), m.Layers...), m.ID) }

// Driver is what the store needs of the VMM driver.
type Driver interface {
	// DiskFile names a disk file in the driver's format.
	DiskFile(base string) string
	// DiscardImage removes an image's memory and state wherever the driver
	// keeps them (img nil: whatever a capture cut short left).
	DiscardImage(dir string, img *vmm.Image) error
	// DiskBacking and Relink read and set the file a disk layer is backed
	// by (a layer fetched from the image store names this node's copy).
	DiskBacking(path string) (string, error)
	Relink(ctx context.Context, path, backing string) error
}

// Options configure a Store.
type Options struct {
	Dir       string // <data>/images
	Driver    Driver
	Referrers Referrers
	Host      string // the node's id, in errors
	// ColdAfter moves an image's RAM to the cold tier once nothing has
	// mapped or used it for this long (cold.go). 0: never.
	ColdAfter time.Duration
	// Tiers are tried after the cold tier to bring an image's RAM back
	// (tier.go); none today.
	Tiers []Tier
	// Remote is the image store the cluster's nodes share (remote.go); nil:
	// images stay on this host.
	Remote *Remote
	// Templates find, on this node, the template an image fetched from
	// the image store stands on (nil: the path its node recorded).
	Templates Templates
	Logger    *slog.Logger
}

// Templates resolve the template a disk chain stands on. An image in the
// image store names its template by key and hash, never by the path its
// node kept the template's files at: a template built in the cluster is
// at another path on every node (its builder's build folder, another
// node's template cache).
type Templates interface {
	// Hash is the hash of the template filed under key.
	Hash(ctx context.Context, key string) (string, error)
	// Disk is this node's copy of the base disk of the template filed
	// under key, fetched first if need be, and the template's hash.
	Disk(ctx context.Context, key string) (path, hash string, err error)
}

// Store is a node's images.
type Store struct {
	opts   Options
	log    *slog.Logger
	leases leases
	// gcMu runs one collection at a time; a move to the cold tier holds
	// it too, so gc never removes an image half moved.
	gcMu sync.Mutex
	cold *coldTier
	// tiers bring RAM back: the cold tier first, then Options.Tiers.
	tiers  []Tier
	remote *remote
}

// New opens the images in opts.Dir.
func New(opts Options) *Store {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Store{opts: opts, log: opts.Logger, leases: leases{held: map[string]int{}}}
	s.cold = &coldTier{s: s}
	s.tiers = append([]Tier{s.cold}, opts.Tiers...)
	if opts.Remote != nil {
		s.remote = &remote{Remote: *opts.Remote, uploads: map[string]*imagestore.Upload{}, attempts: map[string]int{}, layers: map[string][]string{},
			fetching: map[string]int{}}
	}
	return s
}

// Root is the folder every image's folder is in.
func (s *Store) Root() string { return s.opts.Dir }

// Dir is image id's folder.
func (s *Store) Dir(id string) string { return filepath.Join(s.opts.Dir, id) }

// LayerPath is where image id keeps its frozen disk layer, in the
// driver's disk format.
func (s *Store) LayerPath(id string) string {
	return filepath.Join(s.Dir(id), s.opts.Driver.DiskFile("disk"))
}

// Create makes a folder for a new image, leased until the caller releases
// it: until a record points at it the folder has no image.json or no
// referrer, and gc must not take it for garbage (it once deleted a
// snapshot being taken).
func (s *Store) Create() (id, dir string, lease *Lease, err error) {
	id = sandbox.NewID(idPrefix)
	dir = s.Dir(id)
	lease = s.Lease(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		lease.Release()
		return "", "", nil, err
	}
	return id, dir, lease, nil
}

// Write records m in its folder.
func (s *Store) Write(m *Meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	// Synced: a crash must leave the old or the new image.json, whole.
	return datadir.WriteFile(filepath.Join(s.Dir(m.ID), metaFile), b)
}

// Read reads image id's record.
func (s *Store) Read(id string) (*Meta, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir(id), metaFile))
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", id, err)
	}
	m := new(Meta)
	return m, json.Unmarshal(b, m)
}

// ReadMachine reads image id for a VM to start from: one that holds a
// saved machine and a disk.
func (s *Store) ReadMachine(id string) (*Meta, error) {
	m, err := s.Read(id)
	if err != nil {
		return nil, err
	}
	if m.VM == nil || m.Disk == "" {
		return nil, fmt.Errorf("image %s is incomplete: no saved machine or no disk", id)
	}
	return m, nil
}

// All reads every image with a readable record.
func (s *Store) All() []*Meta {
	entries, _ := os.ReadDir(s.opts.Dir)
	var out []*Meta
	for _, e := range entries {
		if m, err := s.Read(e.Name()); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// FreezeDisk moves a sandbox's writable overlay into image m as its
// read-only layer, standing on layers. Only done once no VM has the
// overlay open.
func (s *Store) FreezeDisk(m *Meta, disk string, layers []string) error {
	m.Disk = s.LayerPath(m.ID)
	m.Layers = append([]string(nil), layers...)
	if err := os.Rename(disk, m.Disk); err != nil {
		return fmt.Errorf("freeze disk: %w", err)
	}
	ReadOnly(m.Disk)
	return nil
}

// ReadOnly makes a frozen layer read-only on the host too: nothing may
// write to a layer others read.
func ReadOnly(layer string) { os.Chmod(layer, 0o400) }

// Twin is the id of the image made beside image id (a warm image's
// card-less twin: internal/node/cardless.go), "" if there is none. It
// lives as long as the referrers keep it.
func (s *Store) Twin(id string) string {
	b, err := os.ReadFile(filepath.Join(s.Dir(id), twinFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// SetTwin names twin as the image made beside image id.
func (s *Store) SetTwin(id, twin string) error {
	return datadir.WriteFile(filepath.Join(s.Dir(id), twinFile), []byte(twin+"\n"))
}

// RAMMiB is the RAM that images for which keep says true (nil: all) hold
// in tmpfs, as allocated (a sparse image counts only its pages).
func (s *Store) RAMMiB(keep func(*Meta) bool) int {
	var bytes int64
	for _, m := range s.All() {
		if m.VM == nil || m.VM.MemFile == "" || (keep != nil && !keep(m)) {
			continue
		}
		bytes += allocated(m.VM.MemFile)
	}
	return toMiB(bytes)
}

// Size is the bytes image m occupies: state, RAM pages and disk layer.
func Size(m *Meta) int64 {
	var total int64
	for _, p := range []string{m.Disk, m.VM.StateFile, m.VM.MemFile} {
		if p != "" {
			total += allocated(p)
		}
	}
	return total
}

// allocated is the bytes file p takes (0 if it is gone).
func allocated(p string) int64 {
	var st syscall.Stat_t
	if syscall.Stat(p, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// toMiB rounds bytes up to MiB.
func toMiB(bytes int64) int { return int((bytes + 1<<20 - 1) >> 20) }
