package imagefs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/imagestore"
)

// The catalog is which images the folder shows. It lives in the state
// dir, one file per image (<seq>-<id>.json, its manifest), so a server
// started again over the same mount serves the same nodes: an image's
// node ids derive from its seq, which never changes.
//
// Node ids: 1 is the root; image seq's folder is seq<<8, its file k is
// seq<<8 | (k+1).

const (
	rootID       = 1
	filesPerNode = 255
)

func dirNode(seq uint64) uint64         { return seq << 8 }
func fileNode(seq uint64, k int) uint64 { return seq<<8 | uint64(k+1) }
func splitNode(id uint64) (seq uint64, k int) {
	return id >> 8, int(id&0xff) - 1
}

// image is one image the folder shows.
type image struct {
	seq     uint64
	m       *imagestore.Manifest
	readers []*imagestore.FileReader
	added   time.Time

	mu      sync.Mutex
	seen    map[int]bool
	touched []int // chunk indexes in the order reads first touched them
	hold    *imagestore.Hold
}

func (im *image) saw(chunk int) {
	im.mu.Lock()
	if !im.seen[chunk] {
		im.seen[chunk] = true
		im.touched = append(im.touched, chunk)
	}
	im.mu.Unlock()
}

func (s *Server) catalogDir() string { return filepath.Join(s.state, "images") }

// load reads the catalog left in the state dir.
func (s *Server) load() error {
	if err := os.MkdirAll(s.catalogDir(), 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(s.catalogDir())
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		seqText, rest, ok := strings.Cut(name, "-")
		id, isJSON := strings.CutSuffix(rest, ".json")
		seq, err := strconv.ParseUint(seqText, 10, 48)
		if !ok || !isJSON || err != nil || seq == 0 {
			if strings.Contains(name, ".tmp-") {
				os.Remove(filepath.Join(s.catalogDir(), name))
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.catalogDir(), name))
		if err != nil {
			return err
		}
		m := new(imagestore.Manifest)
		if err := json.Unmarshal(b, m); err != nil || m.ID != id {
			return fmt.Errorf("catalog entry %s: not the manifest of %s: %v", name, id, err)
		}
		if err := s.register(seq, m); err != nil {
			return err
		}
		s.nextSeq = max(s.nextSeq, seq+1)
	}
	return nil
}

func (s *Server) register(seq uint64, m *imagestore.Manifest) error {
	if len(m.Files) > filesPerNode {
		return fmt.Errorf("image %s has %d files; at most %d", m.ID, len(m.Files), filesPerNode)
	}
	im := &image{seq: seq, m: m, seen: map[int]bool{}, added: time.Now()}
	for _, f := range m.Files {
		r, err := s.store.Reader(s.life, m, f.Name, im.saw)
		if err != nil {
			return err
		}
		im.readers = append(im.readers, r)
	}
	s.mu.Lock()
	s.bySeq[seq] = im
	s.byID[m.ID] = im
	s.mu.Unlock()
	s.holdLater(im)
	return nil
}

// holdLater keeps im's chunks in the store (imagestore.Hold) from a
// goroutine, retrying: serving must not wait for the store, and a server
// restarted while the store is away still serves what the cache has.
func (s *Server) holdLater(im *image) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for delay := time.Second; ; delay = min(2*delay, time.Minute) {
			h, err := s.store.Hold(s.life, im.m, s.holder)
			if err == nil {
				im.mu.Lock()
				im.hold = h
				im.mu.Unlock()
				return
			}
			s.log.Warn("imagefs: hold image in the store", "image", im.m.ID, "err", err)
			select {
			case <-s.life.Done():
				return
			case <-time.After(delay):
			}
		}
	}()
}

// Add shows image m as <mount>/<id>/<file>. The entry is written to the
// state dir first, so a restarted server shows it too.
func (s *Server) Add(m *imagestore.Manifest) error {
	s.mu.Lock()
	if _, ok := s.byID[m.ID]; ok {
		s.mu.Unlock()
		return nil
	}
	seq := s.nextSeq
	s.nextSeq++
	s.mu.Unlock()
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := datadir.WriteFile(filepath.Join(s.catalogDir(), fmt.Sprintf("%d-%s.json", seq, m.ID)), b); err != nil {
		return err
	}
	return s.register(seq, m)
}

// Remove stops showing image id. The caller removes an image only once no
// VM maps its files: a VM's next fault on a page not yet read would fail.
func (s *Server) Remove(ctx context.Context, id string) error {
	s.mu.Lock()
	im, ok := s.byID[id]
	if ok {
		delete(s.byID, id)
		delete(s.bySeq, im.seq)
	}
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("image %s is not served: %w", id, errdefs.ErrNotFound)
	}
	os.Remove(filepath.Join(s.catalogDir(), fmt.Sprintf("%d-%s.json", im.seq, id)))
	im.mu.Lock()
	h := im.hold
	im.mu.Unlock()
	if h != nil {
		return h.Release(ctx)
	}
	return nil
}

// Path is where image id's file name appears under the mount point.
func Path(mount, id, name string) string { return filepath.Join(mount, id, name) }

// Touched lists the chunks of image id that reads touched, first touch
// first: a prefetch list for the next VM that starts from it.
func (s *Server) Touched(id string) []int {
	s.mu.Lock()
	im := s.byID[id]
	s.mu.Unlock()
	if im == nil {
		return nil
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	return append([]int(nil), im.touched...)
}

// Prefetch reads the given chunks of image id into the cache, in parallel
// (replaying a list Touched gave for an earlier VM of the same image).
func (s *Server) Prefetch(ctx context.Context, id string, chunks []int) error {
	s.mu.Lock()
	im := s.byID[id]
	s.mu.Unlock()
	if im == nil {
		return fmt.Errorf("image %s is not served: %w", id, errdefs.ErrNotFound)
	}
	return s.store.Prefetch(ctx, im.m, chunks)
}

// images lists what the root folder shows, by seq.
func (s *Server) images() []*image {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*image, 0, len(s.bySeq))
	for _, im := range s.bySeq {
		out = append(out, im)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}
