package images

import (
	"context"
	"encoding/json"
	"os"
	"time"

	"github.com/zeish/zeish/internal/imagestore"
)

// A node's claim in the shared image store (imagestore.Claim) names every
// image it holds: each folder of its images dir (whatever state it is in:
// an image being captured, uploaded, in use, or only a disk layer), every
// image a lease holds, every fetch in flight. The control plane's sweep
// deletes from the store only images no record and no node's fresh claim
// needs, so a node's images, and those its disk chains stand on, stay in
// the store while the node lives and holds them, whatever the records
// say; a node lost for good stops renewing its claim, and after the
// sweep's grace only the records keep its images. docs/images.md
// ("Garbage collection") says why this is safe against uploads racing the
// records that will name them.

// claimed is what the node claims now.
func (s *Store) claimed() []string {
	ids := map[string]bool{}
	entries, _ := os.ReadDir(s.opts.Dir)
	for _, e := range entries {
		if e.IsDir() && imagestore.CheckID("image id", e.Name()) == nil {
			ids[e.Name()] = true
		}
	}
	s.leases.mu.Lock()
	for id := range s.leases.held {
		ids[id] = true
	}
	s.leases.mu.Unlock()
	if r := s.remote; r != nil {
		r.mu.Lock()
		for id := range r.uploads {
			ids[id] = true
		}
		for id := range r.fetching {
			ids[id] = true
		}
		r.mu.Unlock()
	}
	out := make([]string, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	return out
}

// Claim writes the node's claim now (without a store: nothing).
func (s *Store) Claim(ctx context.Context) error {
	if s.remote == nil {
		return nil
	}
	_, err := s.remote.Store.Claim(ctx, s.opts.Host, s.claimed())
	return err
}

// RunClaims renews the node's claim every ClaimEvery until ctx ends.
func (s *Store) RunClaims(ctx context.Context) {
	if s.remote == nil {
		return
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := s.Claim(cctx); err != nil && ctx.Err() == nil {
			s.log.Warn("image store: renew this node's claim on its images", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.remote.Store.ClaimEvery()):
		}
	}
}

// claimFetch claims image id for a fetch about to begin, and waits out
// any sweep that could have missed the claim; done ends it (the image's
// folder, if the fetch made one, is claimed from then on).
func (s *Store) claimFetch(ctx context.Context, id string) (done func(), err error) {
	r := s.remote
	r.mu.Lock()
	r.fetching[id]++
	r.mu.Unlock()
	done = func() {
		r.mu.Lock()
		if r.fetching[id]--; r.fetching[id] <= 0 {
			delete(r.fetching, id)
		}
		r.mu.Unlock()
	}
	if err := r.Store.ClaimAndWait(ctx, s.opts.Host, s.claimed()); err != nil {
		done()
		return nil, err
	}
	return done, nil
}

// Needs is what the image of manifest m stands on: the images of its disk
// chain, and the files of the template at its bottom when it names one (a
// node that fetches it stands it on its copy of the template; a built-in's
// files are on every node, and in no store). The control plane's sweep
// keeps them with it (a sweep's imagestore.Options.Needs). A template's
// files stand on nothing.
func Needs(m *imagestore.Manifest) ([]string, error) {
	if len(m.Meta) == 0 {
		return nil, nil
	}
	var p portable
	if err := json.Unmarshal(m.Meta, &p); err != nil {
		return nil, err
	}
	needs := append([]string(nil), p.Layers...)
	if p.Template != "" {
		needs = append(needs, imagestore.TemplateImage(p.Template))
	}
	return needs, nil
}
