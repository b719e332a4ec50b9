package imagestore

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"time"
)

// Manifest says what one image holds: its files, each a list of extents
// that point into content-addressed chunks. It is complete by itself: a
// child's manifest lists the parent's chunks it still uses beside its own,
// so reading an image never needs its ancestors' manifests, and a chunk is
// live exactly while some manifest (or lease) lists it.
type Manifest struct {
	Version   int       `json:"version"`
	ID        string    `json:"id"`
	Parent    string    `json:"parent,omitempty"` // the image it was uploaded as a delta of, for lineage only
	CreatedAt time.Time `json:"created_at"`
	// Meta is the caller's, stored as given (what a node needs to start a VM
	// from the image: memory size, the disk's backing image, …).
	Meta   json.RawMessage `json:"meta,omitempty"`
	Chunks []ChunkRef      `json:"chunks"`
	Files  []File          `json:"files"`
}

// ChunkRef names one chunk: the SHA-256 of its bytes, and its length.
type ChunkRef struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// File is one file of an image. Bytes no extent covers are zero (holes and
// zero pages are never stored).
type File struct {
	Name    string   `json:"name"`
	Size    int64    `json:"size"`
	Extents []Extent `json:"extents"`
}

// Extent says that Len bytes of the file from Off are the bytes of chunk
// number Chunk (an index into Manifest.Chunks) from At. Encoded as a
// four-number array: a manifest of a fragmented image holds many.
type Extent struct {
	Off, Len int64
	Chunk    int
	At       int64
}

func (e Extent) MarshalJSON() ([]byte, error) {
	return json.Marshal([4]int64{e.Off, e.Len, int64(e.Chunk), e.At})
}

func (e *Extent) UnmarshalJSON(b []byte) error {
	var a [4]int64
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	*e = Extent{Off: a[0], Len: a[1], Chunk: int(a[2]), At: a[3]}
	return nil
}

const manifestVersion = 1

// validID is what image ids and file names may be: they become object keys
// and file names.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// CheckID refuses an id or file name that cannot be a key.
func CheckID(what, id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("%s %q: want 1-128 of [A-Za-z0-9_.-], not starting with a dot", what, id)
	}
	return nil
}

// File returns the file called name.
func (m *Manifest) File(name string) (*File, bool) {
	for i := range m.Files {
		if m.Files[i].Name == name {
			return &m.Files[i], true
		}
	}
	return nil, false
}

// StoredBytes is what the image's chunks hold, shared ones included.
func (m *Manifest) StoredBytes() int64 {
	var n int64
	for _, c := range m.Chunks {
		n += c.Size
	}
	return n
}

// check refuses a manifest that could make a reader go wrong: extents out
// of order, overlapping, outside the file or their chunk, bad digests.
func (m *Manifest) check() error {
	if m.Version != manifestVersion {
		return fmt.Errorf("manifest %s: version %d, want %d", m.ID, m.Version, manifestVersion)
	}
	if err := CheckID("image id", m.ID); err != nil {
		return err
	}
	for _, c := range m.Chunks {
		if b, err := hex.DecodeString(c.Digest); err != nil || len(b) != 32 || c.Size <= 0 {
			return fmt.Errorf("manifest %s: bad chunk %q (%d bytes)", m.ID, c.Digest, c.Size)
		}
	}
	for _, f := range m.Files {
		if err := CheckID("file name", f.Name); err != nil {
			return fmt.Errorf("manifest %s: %w", m.ID, err)
		}
		end := int64(0)
		for _, e := range f.Extents {
			if e.Off < end || e.Len <= 0 || e.Off+e.Len > f.Size || e.Chunk < 0 || e.Chunk >= len(m.Chunks) ||
				e.At < 0 || e.At+e.Len > m.Chunks[e.Chunk].Size {
				return fmt.Errorf("manifest %s: file %s: bad extent %+v", m.ID, f.Name, e)
			}
			end = e.Off + e.Len
		}
	}
	return nil
}

// find returns the index of the first extent of f that ends after off.
func (f *File) find(off int64) int {
	return sort.Search(len(f.Extents), func(i int) bool {
		e := f.Extents[i]
		return e.Off+e.Len > off
	})
}

// Object keys under the store's prefix.
const (
	chunkPrefix    = "chunks/"
	manifestPrefix = "manifests/"
	leasePrefix    = "leases/"
	gcPrefix       = "gc/"
	claimPrefix    = "claims/"
	manifestSuffix = ".json"
)

func chunkKey(digest string) string { return chunkPrefix + digest[:2] + "/" + digest }
func manifestKey(id string) string  { return manifestPrefix + id + manifestSuffix }
func leaseKey(name string) string   { return leasePrefix + name + manifestSuffix }
func claimKey(holder string) string { return claimPrefix + holder + manifestSuffix }
func digestOfKey(key string) string { return key[len(key)-64:] }
