package imagestore

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/imagestore/blob"
)

// Cache keeps verified chunks on the node's disk, in <dir>/<aa>/<digest>,
// up to a bound in bytes: the least recently used chunk that no reader
// holds goes first. A chunk enters only after its digest matched, under a
// temporary name renamed into place, so a file under its digest's name
// is whole; chunks found at start (a restart) are checked once, on first
// use, in case the crash came before the kernel wrote them out.
type Cache struct {
	dir   string
	limit int64
	log   *slog.Logger

	mu      sync.Mutex
	entries map[string]*cacheEntry
	lru     list.List // front: most recently used
	size    int64
}

type cacheEntry struct {
	digest   string
	size     int64
	file     *os.File // open while cached
	pins     int      // readers holding it; never evicted while > 0
	verified bool
	elem     *list.Element
	gone     bool // evicted while pinned: removed when the last pin goes
}

const cacheTemp = ".part-"

// OpenCache uses dir (created if missing) for at most limit bytes.
func OpenCache(dir string, limit int64, log *slog.Logger) (*Cache, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &Cache{dir: dir, limit: limit, log: log, entries: map[string]*cacheEntry{}}
	type found struct {
		digest string
		size   int64
		mtime  time.Time
	}
	var all []found
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		name := d.Name()
		if strings.HasPrefix(name, cacheTemp) {
			os.Remove(path) // a fetch cut short
			return nil
		}
		if b, err := hex.DecodeString(name); err != nil || len(b) != sha256.Size || filepath.Base(filepath.Dir(path)) != name[:2] {
			return nil
		}
		if st, err := d.Info(); err == nil {
			all = append(all, found{name, st.Size(), st.ModTime()})
		}
		return nil
	})
	// Oldest first, so the newest end up at the front.
	sort.Slice(all, func(i, j int) bool { return all[i].mtime.Before(all[j].mtime) })
	for _, f := range all {
		e := &cacheEntry{digest: f.digest, size: f.size}
		e.elem = c.lru.PushFront(e)
		c.entries[f.digest] = e
		c.size += f.size
	}
	c.mu.Lock()
	c.evictLocked(0)
	c.mu.Unlock()
	return c, nil
}

func (c *Cache) path(digest string) string { return filepath.Join(c.dir, digest[:2], digest) }

// Size is what the cache holds, in bytes.
func (c *Cache) Size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

// Has says whether digest is cached.
func (c *Cache) Has(digest string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[digest]
	return ok
}

// cachedChunk is a pinned cache entry: read it, then release it.
type cachedChunk struct {
	c *Cache
	e *cacheEntry
}

func (h cachedChunk) ReadAt(p []byte, off int64) (int, error) { return h.e.file.ReadAt(p, off) }

func (h cachedChunk) release() {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	h.e.pins--
	if h.e.pins == 0 && h.e.gone {
		h.c.dropLocked(h.e)
	}
}

// acquire pins digest for reading, or says it is not cached. A chunk left
// by an earlier process is verified first; one that fails is dropped.
func (c *Cache) acquire(digest string, size int64) (cachedChunk, bool) {
	c.mu.Lock()
	e, ok := c.entries[digest]
	if !ok || e.gone {
		c.mu.Unlock()
		return cachedChunk{}, false
	}
	e.pins++
	c.lru.MoveToFront(e.elem)
	needCheck := !e.verified || e.file == nil
	c.mu.Unlock()
	h := cachedChunk{c, e}
	if needCheck && !c.check(e, size) {
		h.release()
		c.mu.Lock()
		c.removeLocked(e)
		c.mu.Unlock()
		return cachedChunk{}, false
	}
	return h, true
}

// check opens and verifies an entry found on disk at start.
func (c *Cache) check(e *cacheEntry, size int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.verified && e.file != nil {
		return true
	}
	b, err := os.ReadFile(c.path(e.digest))
	if err == nil && int64(len(b)) == size {
		if d, _ := digestOf(b); d == e.digest {
			if f, err := os.Open(c.path(e.digest)); err == nil {
				e.file, e.verified = f, true
				return true
			}
		}
	}
	c.log.Warn("chunk cache: dropping a chunk that does not match its digest", "chunk", e.digest, "err", err)
	return false
}

// put stores a verified chunk. It fails with a storage_full error when the
// cache's disk is full; the chunk is then simply not cached.
func (c *Cache) put(digest string, data []byte) error {
	c.mu.Lock()
	if _, ok := c.entries[digest]; ok {
		c.mu.Unlock()
		return nil
	}
	if int64(len(data)) > c.limit {
		c.mu.Unlock()
		return nil
	}
	c.evictLocked(int64(len(data)))
	c.mu.Unlock()

	dir := filepath.Join(c.dir, digest[:2])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return c.ioError(err)
	}
	tmp, err := os.CreateTemp(dir, cacheTemp)
	if err != nil {
		return c.ioError(err)
	}
	_, err = tmp.Write(data)
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return c.ioError(err)
	}
	if err := os.Rename(tmp.Name(), c.path(digest)); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return c.ioError(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[digest]; ok { // another fetch of the same chunk won
		tmp.Close()
		return nil
	}
	e := &cacheEntry{digest: digest, size: int64(len(data)), file: tmp, verified: true}
	e.elem = c.lru.PushFront(e)
	c.entries[digest] = e
	c.size += e.size
	return nil
}

func (c *Cache) ioError(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return blob.Errorf(blob.ErrFull, "chunk cache %s: %v", c.dir, err)
	}
	return fmt.Errorf("chunk cache %s: %w (%w)", c.dir, err, errdefs.ErrInternal)
}

// evictLocked drops least recently used, unpinned chunks until need more
// bytes fit under the limit.
func (c *Cache) evictLocked(need int64) {
	for el := c.lru.Back(); el != nil && c.size+need > c.limit; {
		prev := el.Prev()
		if e := el.Value.(*cacheEntry); e.pins == 0 {
			c.removeLocked(e)
		}
		el = prev
	}
}

// removeLocked takes e out of the index; its file goes now, or when its
// last reader lets go.
func (c *Cache) removeLocked(e *cacheEntry) {
	if e.gone {
		return
	}
	e.gone = true
	delete(c.entries, e.digest)
	c.lru.Remove(e.elem)
	c.size -= e.size
	if e.pins == 0 {
		c.dropLocked(e)
	}
}

func (c *Cache) dropLocked(e *cacheEntry) {
	if e.file != nil {
		e.file.Close()
	}
	os.Remove(c.path(e.digest))
}

// Close closes the cache's open files; the chunks stay on disk.
func (c *Cache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if e.file != nil {
			e.file.Close()
			e.file = nil
		}
	}
}
