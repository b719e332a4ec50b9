package images

import (
	"context"
	"os"
)

// Roots are the images that records need.
type Roots struct {
	// Whole are needed with their memory and state: a VM maps them, a
	// stopped sandbox resumes from them, a snapshot or a warm template
	// keeps them.
	Whole map[string]bool
	// Layers are needed only for their disk layer: a disk chain goes
	// through them.
	Layers map[string]bool
}

// NewRoots is an empty Roots.
func NewRoots() Roots { return Roots{Whole: map[string]bool{}, Layers: map[string]bool{}} }

// Referrers is what outside the store refers to images: the node's
// records of sandboxes, snapshots and templates.
type Referrers interface {
	// Roots are the images the records need now.
	Roots(ctx context.Context) (Roots, error)
	// Mapped are the images whose RAM a VM maps, or a record says one
	// will: the cold tier leaves them in tmpfs.
	Mapped(ctx context.Context) (map[string]bool, error)
}

// Collect removes what no record needs and no lease holds: an image's
// memory and state when nothing will load them, the whole folder when no
// disk chain goes through its layer either.
func (s *Store) Collect(ctx context.Context) {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	// An image released while the referrers are read may have a referrer
	// the read missed: everything released from here on is kept this round.
	s.leases.mark()
	roots, err := s.opts.Referrers.Roots(ctx)
	leased := s.leases.roots()
	if err != nil {
		s.log.Error("gc: read referrers", "err", err)
		return
	}
	for id := range leased {
		roots.Whole[id] = true
	}
	entries, _ := os.ReadDir(s.opts.Dir)
	for _, e := range entries {
		if id := e.Name(); !roots.Whole[id] {
			s.collect(ctx, id, roots.Layers[id])
		}
	}
}

// collect removes image id's memory and state, and its folder unless
// keepLayer.
func (s *Store) collect(ctx context.Context, id string, keepLayer bool) {
	dir := s.Dir(id)
	m, err := s.Read(id)
	if err != nil {
		s.log.Warn("gc: removing unreadable image", "image", id, "err", err)
		os.RemoveAll(dir)
		s.opts.Driver.DiscardImage(dir, nil) // a capture that crashed before image.json
		return
	}
	if m.VM != nil {
		if err := s.opts.Driver.DiscardImage(dir, m.VM); err != nil {
			s.log.Warn("gc: discard image memory", "image", id, "err", err)
		}
		for _, t := range s.tiers {
			if err := t.Drop(id); err != nil {
				s.log.Warn("gc: drop image memory from a tier", "image", id, "tier", t.Name(), "err", err)
			}
		}
		if keepLayer && (m.VM.MemFile != "" || m.VM.StateFile != "") {
			m.VM = nil // the layer stays for the disks backed by it
			s.Write(m)
			s.log.Info("gc: released image memory", "image", id)
		}
	}
	if !keepLayer {
		// Only this node's copy goes: the shared store's is the control
		// plane's sweep's to delete, once no record, no node's claim (a
		// fetch in flight elsewhere) and no kept chain needs it
		// (docs/images.md). An upload still reading the folder keeps it
		// for the next round.
		if s.uploading(id) {
			s.log.Info("gc: image kept while it uploads", "image", id)
			return
		}
		os.RemoveAll(dir)
		s.log.Info("gc: removed image", "image", id)
	}
}
