package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// An image is a sandbox captured at one instant, in <data>/images/<id>/: its
// memory and device state (vmm.Image) and, once frozen, its disk as a
// read-only layer (in the driver's format, Driver.DiskFile) that new
// overlays are backed by. Forks, snapshots and stops make images; many
// sandboxes and snapshots may use one.
// Nothing counts references: gc derives them from the store and removes
// what no sandbox or snapshot needs, so a crash can never leak or free one.

const (
	imagePrefix   = "img_"
	imageMetaFile = "image.json"
)

// imageMeta is what image.json records.
type imageMeta struct {
	ID        string     `json:"id"`
	SandboxID string     `json:"sandbox_id"`
	VM        *vmm.Image `json:"vm"`
	// Disk is the frozen layer in the image's folder ("" until frozen);
	// Layers are the images its backing chain goes through.
	Disk   string   `json:"disk,omitempty"`
	Layers []string `json:"layers,omitempty"`
	// MergedFrom is set on a merge of a chain (merge.go): the image whose
	// layer topped it. Such an image has only a disk, backed by the
	// template's.
	MergedFrom string    `json:"merged_from,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

func (n *Node) imagesDir() string         { return filepath.Join(n.opts.DataDir, "images") }
func (n *Node) imageDir(id string) string { return filepath.Join(n.imagesDir(), id) }

// layerPath is where image id keeps its frozen disk layer, in the driver's
// disk format.
func (n *Node) layerPath(id string) string {
	return filepath.Join(n.imageDir(id), n.opts.Driver.DiskFile("disk"))
}

// diskPath is the writable overlay of generation gen of sandbox id.
func (n *Node) diskPath(id string, gen int) string {
	return filepath.Join(n.sandboxDir(id), n.opts.Driver.DiskFile(fmt.Sprintf("disk-%d", gen)))
}

// newImageDir makes a folder for a new image, pinned until the caller's
// unpin: until a record points at it the folder has no image.json or no
// referrer, and gc must not take it for garbage (it once deleted a snapshot
// being taken).
func (n *Node) newImageDir() (id, dir string, unpin func(), err error) {
	id = sandbox.NewID(imagePrefix)
	dir = n.imageDir(id)
	unpin = n.pin(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		unpin()
		return "", "", nil, err
	}
	return id, dir, unpin, nil
}

func (n *Node) writeImage(m *imageMeta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	// Synced: a crash must leave the old or the new image.json, whole.
	return datadir.WriteFile(filepath.Join(n.imageDir(m.ID), imageMetaFile), b)
}

func (n *Node) readImage(id string) (*imageMeta, error) {
	b, err := os.ReadFile(filepath.Join(n.imageDir(id), imageMetaFile))
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", id, err)
	}
	m := new(imageMeta)
	return m, json.Unmarshal(b, m)
}

// readMachine reads image id for a VM to start from: one that holds a
// saved machine and a disk.
func (n *Node) readMachine(id string) (*imageMeta, error) {
	m, err := n.readImage(id)
	if err != nil {
		return nil, err
	}
	if m.VM == nil || m.Disk == "" {
		return nil, fmt.Errorf("image %s is incomplete: no saved machine or no disk", id)
	}
	return m, nil
}

// freezeDisk moves a sandbox's writable overlay into the image as its
// read-only layer. Only done once no VM has the overlay open.
func (n *Node) freezeDisk(m *imageMeta, disk string, layers []string) error {
	m.Disk = n.layerPath(m.ID)
	m.Layers = append([]string(nil), layers...)
	if err := os.Rename(disk, m.Disk); err != nil {
		return fmt.Errorf("freeze disk: %w", err)
	}
	// Read-only on the host too: nothing may write to a layer others read.
	os.Chmod(m.Disk, 0o400)
	return nil
}

// gc removes images that no sandbox or snapshot needs any more: memory and
// state when no VM maps them and nothing will load them, the whole folder
// when no disk chain goes through its layer either.
func (n *Node) gc(ctx context.Context) {
	n.gcMu.Lock()
	defer n.gcMu.Unlock()
	// An image unpinned while gc reads the store may have a referrer the
	// read missed: everything unpinned from here on is kept this round.
	n.mu.Lock()
	n.unpinned = map[string]bool{}
	n.mu.Unlock()
	mem, disk := map[string]bool{}, map[string]bool{}
	rows, err := n.opts.Store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		n.log.Error("gc: list sandboxes", "err", err)
		return
	}
	for _, r := range rows {
		for _, l := range r.Layers {
			disk[l] = true
		}
		if r.ResumeImage != "" {
			mem[r.ResumeImage] = true
		}
		if h, _ := r.VMHandle(); h != nil && h.Spec.From != nil && h.Spec.From.MemFile != "" {
			mem[filepath.Base(h.Spec.From.Dir)] = true
		}
	}
	snaps, err := n.opts.Store.ListSnapshots(ctx, "")
	if err != nil {
		n.log.Error("gc: list snapshots", "err", err)
		return
	}
	for _, s := range snaps {
		mem[s.Image] = true
		if m, err := n.readImage(s.Image); err == nil {
			for _, l := range m.Layers {
				disk[l] = true
			}
		}
	}
	// A warm template's machine (and its card-less twin) lives as long as
	// the template; once it is deleted, as long as a sandbox started from it
	// needs it.
	tpls, err := n.opts.Store.ListTemplates(ctx)
	if err != nil {
		n.log.Error("gc: list templates", "err", err)
		return
	}
	for _, t := range tpls {
		if t.Warm != nil && t.State != sandbox.TemplateDeleted {
			mem[t.Warm.Image], disk[t.Warm.Image] = true, true
			if id := n.cardlessID(t.Warm.Image); id != "" { // made beside it (cardless.go)
				mem[id], disk[id] = true, true
			}
		}
	}
	n.mu.Lock()
	for id := range n.pinned {
		mem[id] = true
	}
	for id := range n.unpinned {
		mem[id] = true
	}
	n.unpinned = nil
	n.mu.Unlock()
	entries, _ := os.ReadDir(n.imagesDir())
	for _, e := range entries {
		id := e.Name()
		if mem[id] {
			continue
		}
		m, err := n.readImage(id)
		if err != nil {
			n.log.Warn("gc: removing unreadable image", "image", id, "err", err)
			os.RemoveAll(n.imageDir(id))
			n.opts.Driver.DiscardImage(n.imageDir(id), nil) // a capture that crashed before image.json
			continue
		}
		if m.VM != nil {
			if err := n.opts.Driver.DiscardImage(n.imageDir(id), m.VM); err != nil {
				n.log.Warn("gc: discard image memory", "image", id, "err", err)
			}
			os.Remove(n.coldPath(id)) // its memory, moved to disk (cold.go)
			if disk[id] && (m.VM.MemFile != "" || m.VM.StateFile != "") {
				m.VM = nil // the layer stays for the disks backed by it
				n.writeImage(m)
				n.log.Info("gc: released image memory", "image", id)
			}
		}
		if !disk[id] {
			os.RemoveAll(n.imageDir(id))
			n.log.Info("gc: removed image", "image", id)
		}
	}
}

// pin keeps an image alive while an operation still needs it but no record
// points at it yet (children being started from it).
func (n *Node) pin(id string) func() {
	n.mu.Lock()
	n.pinned[id]++
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		if n.pinned[id]--; n.pinned[id] <= 0 {
			delete(n.pinned, id)
		}
		if n.unpinned != nil {
			n.unpinned[id] = true
		}
		n.mu.Unlock()
	}
}
