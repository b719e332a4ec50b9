package imagestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/zeish/zeish/internal/imagestore/blob"
)

// The sweep deletes the manifests of images nothing refers to, so that the
// chunk gc (gc.go) frees their chunks: the images a node lost for good had
// uploaded, a lost builder's templates, what a crash left behind. What
// refers to an image is said by two parties, neither trusted alone:
//
//   - the records the caller (the control plane) reads from its database,
//     passed as Referenced: snapshots, stopped sandboxes, templates;
//   - the nodes, each of which keeps a claim (claims/<node>.json) naming
//     every image it holds or is fetching, rewritten every ClaimEvery. A
//     claim counts while it is younger than SweepGrace: a node lost for
//     good stops claiming, and its images are then named by the records
//     only.
//
// Every image that one of those names keeps the images its own disk chain
// stands on (Options.Needs, read from its manifest), transitively.
//
// A manifest goes only when it is older than SweepGrace as well, in the
// store's clock. That is what makes the race between an upload and the
// record that will name it safe: a node claims an image from the moment it
// holds its folder, before its upload begins, and renews that claim every
// ClaimEvery (much shorter than SweepGrace), so a manifest old enough to
// be swept belongs to an image its node claimed before the sweep began,
// unless that node stopped claiming it (it dropped the image, or stopped
// for SweepGrace). A record written about an image older than the grace
// (a restore, a clone of a snapshot) names an image some record or claim
// already named.
//
// A node that starts fetching an image claims it first and waits out every
// gc run or sweep announced before its claim (waitForGC), as an upload
// does for chunks: a sweep that missed the claim has then ended, and one
// that came later sees it. A sweep announces itself like a gc run, reads
// the referrers, then the claims, then the manifests, and deletes nothing
// once GCWindow has passed since it announced itself; a claim or manifest
// it cannot read makes it delete nothing. It deletes manifests only: the
// chunks go at the next gc, which keeps every chunk a remaining manifest
// lists, so a sweep killed midway leaves every image whole or gone.

// claimBody is what a claim object holds.
type claimBody struct {
	Holder string   `json:"holder"`
	Images []string `json:"images"`
}

// Claim writes holder's claim (a node's id): the images it holds or is
// about to fetch, replacing its previous claim. It returns the claim's
// modification time in the store's clock.
func (s *Store) Claim(ctx context.Context, holder string, images []string) (time.Time, error) {
	if err := CheckID("holder", holder); err != nil {
		return time.Time{}, err
	}
	images = append([]string(nil), images...)
	sort.Strings(images)
	b, err := json.Marshal(claimBody{Holder: holder, Images: images})
	if err != nil {
		return time.Time{}, err
	}
	key := claimKey(holder)
	if err := s.b.Put(ctx, key, b, sumOf(b)); err != nil {
		return time.Time{}, fmt.Errorf("claim of %s: %w", holder, err)
	}
	st, err := s.b.Stat(ctx, key)
	if err != nil {
		return time.Time{}, fmt.Errorf("claim of %s: %w", holder, err)
	}
	return st.ModTime, nil
}

// ClaimAndWait writes holder's claim and returns once no sweep that could
// have missed it is still deleting: from then on, an image the claim names
// that is still durable stays so while the claim is renewed.
func (s *Store) ClaimAndWait(ctx context.Context, holder string, images []string) error {
	at, err := s.Claim(ctx, holder, images)
	if err != nil {
		return err
	}
	return s.waitForGC(ctx, at)
}

// Unclaim deletes holder's claim (a node leaving for good).
func (s *Store) Unclaim(ctx context.Context, holder string) error {
	if err := CheckID("holder", holder); err != nil {
		return err
	}
	return s.b.Delete(ctx, claimKey(holder))
}

// SweepStats says what one sweep saw and did.
type SweepStats struct {
	Manifests  int // images in the store
	Referenced int // of those, named by a record or needed by one that is
	Claimed    int // of those, kept by a node's claim only
	Young      int // unreferenced, but younger than SweepGrace or needed by such an image
	Swept      int // deleted
	Claims     int // fresh claims read
	// Missing are images a record or claim needs that the store lacks
	// (not uploaded yet, or never).
	Missing int
}

// Referenced reads the images the records name (the control plane's
// database); the sweep calls it after announcing itself.
type Referenced func(ctx context.Context) (map[string]bool, error)

// Sweep deletes the manifests of images that no record (referenced), no
// node's fresh claim and no image kept by either needs, once older than
// SweepGrace. Sweeps may run at once (each delete is of an image none
// needs); the caller runs one at a time to save the work.
func (s *Store) Sweep(ctx context.Context, referenced Referenced) (st SweepStats, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.GCWindow)
	defer cancel()
	_, now, end, err := s.announce(ctx, "sweep") // now: the store's clock
	if err != nil {
		return st, fmt.Errorf("sweep: %w", err)
	}
	defer end()
	// Records, then claims, then manifests: see above.
	refs, err := referenced(ctx)
	if err != nil {
		return st, fmt.Errorf("sweep: read the records, deleting nothing: %w", err)
	}
	claimed, err := s.freshClaims(ctx, now, &st)
	if err != nil {
		return st, err
	}
	manifests := map[string]blob.Info{}
	err = s.b.List(ctx, manifestPrefix, func(o blob.Info) error {
		if id, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, manifestPrefix), manifestSuffix); ok {
			manifests[id] = o
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("sweep: list manifests: %w", err)
	}
	st.Manifests = len(manifests)
	byRecord, err := s.closure(ctx, refs, manifests, &st)
	if err != nil {
		return st, err
	}
	byClaim, err := s.closure(ctx, claimed, manifests, &st)
	if err != nil {
		return st, err
	}
	// A young image keeps what it stands on too: the record that will
	// name it may be on its way.
	young := map[string]bool{}
	for id, o := range manifests {
		if !byRecord[id] && !byClaim[id] && now.Sub(o.ModTime) <= s.opts.SweepGrace+slack {
			young[id] = true
		}
	}
	byYoung, err := s.closure(ctx, young, manifests, &st)
	if err != nil {
		return st, err
	}
	var doomed []string
	for id := range manifests {
		switch {
		case byRecord[id]:
			st.Referenced++
		case byClaim[id]:
			st.Claimed++
		case byYoung[id]:
			st.Young++
		default:
			doomed = append(doomed, id)
		}
	}
	s.needsOf.Range(func(k, _ any) bool { // forget the images gone
		if _, ok := manifests[k.(string)]; !ok {
			s.needsOf.Delete(k)
		}
		return true
	})
	sort.Strings(doomed)
	for _, id := range doomed {
		if err := s.b.Delete(ctx, manifestKey(id)); err != nil {
			return st, fmt.Errorf("sweep: image %s: %w", id, err)
		}
		st.Swept++
		s.opts.Metrics.SweptImages.Inc()
		s.log.Info("image store sweep: deleted an image nothing refers to", "image", id, "age", now.Sub(manifests[id].ModTime).Round(time.Second))
	}
	s.log.Info("image store sweep", "manifests", st.Manifests, "referenced", st.Referenced, "claimed", st.Claimed,
		"young", st.Young, "swept", st.Swept, "claims", st.Claims, "missing", st.Missing)
	return st, nil
}

// freshClaims reads the claims younger than SweepGrace (older ones past
// twice that are removed: their node is gone).
func (s *Store) freshClaims(ctx context.Context, now time.Time, st *SweepStats) (map[string]bool, error) {
	var claims []blob.Info
	if err := s.b.List(ctx, claimPrefix, func(o blob.Info) error { claims = append(claims, o); return nil }); err != nil {
		return nil, fmt.Errorf("sweep: list claims: %w", err)
	}
	out := map[string]bool{}
	for _, o := range claims {
		age := now.Sub(o.ModTime)
		if age > s.opts.SweepGrace+slack {
			if age > 2*s.opts.SweepGrace {
				s.b.Delete(ctx, o.Key)
			}
			continue
		}
		b, err := s.b.Get(ctx, o.Key, 0, -1)
		if errors.Is(err, blob.ErrNotFound) {
			continue // its node left (Unclaim)
		}
		if err != nil {
			return nil, fmt.Errorf("sweep: %w", err)
		}
		var c claimBody
		if err := json.Unmarshal(b, &c); err != nil {
			return nil, fmt.Errorf("sweep: claim %s is not readable, deleting nothing: %w", o.Key, err)
		}
		st.Claims++
		for _, id := range c.Images {
			out[id] = true
		}
	}
	return out, nil
}

// closure is roots and every image their disk chains stand on, as their
// manifests say (Options.Needs).
func (s *Store) closure(ctx context.Context, roots map[string]bool, manifests map[string]blob.Info, st *SweepStats) (map[string]bool, error) {
	out := map[string]bool{}
	var queue []string
	for id := range roots {
		queue = append(queue, id)
	}
	for len(queue) > 0 {
		id := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		if out[id] {
			continue
		}
		out[id] = true
		if _, ok := manifests[id]; !ok {
			st.Missing++
			continue
		}
		needs, err := s.needs(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("sweep: deleting nothing: %w", err)
		}
		queue = append(queue, needs...)
	}
	return out, nil
}

// needs is what image id stands on (Options.Needs of its manifest),
// remembered: a manifest never changes.
func (s *Store) needs(ctx context.Context, id string) ([]string, error) {
	if s.opts.Needs == nil {
		return nil, nil
	}
	if v, ok := s.needsOf.Load(id); ok {
		return v.([]string), nil
	}
	m, err := s.Manifest(ctx, id)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, nil // deleted since the list: it needs nothing any more
	}
	if err != nil {
		return nil, err
	}
	needs, err := s.opts.Needs(m)
	if err != nil {
		return nil, fmt.Errorf("image %s: what it stands on: %w", id, err)
	}
	s.needsOf.Store(id, needs)
	return needs, nil
}

// TemplateImage is the id a template's files have in the store.
func TemplateImage(templateID string) string { return "tpl-" + templateID }
