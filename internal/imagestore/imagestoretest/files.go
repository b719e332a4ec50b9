package imagestoretest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/sparsecopy"
)

const page = 4096

// RAMFile writes a file shaped like a guest's RAM: size bytes with runs of
// random pages, zero pages written inside them, and holes, all seeded.
// It returns the bytes of non-zero pages.
func RAMFile(t testing.TB, path string, size int64, seed uint64) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	buf := make([]byte, page)
	var data int64
	for off := int64(0); off < size; off += page {
		switch k := r.IntN(10); {
		case k < 4: // a hole
		case k < 5: // a zero page written out
			clear(buf)
			if _, err := f.WriteAt(buf, off); err != nil {
				t.Fatal(err)
			}
		default:
			fillRandom(r, buf)
			if _, err := f.WriteAt(buf, off); err != nil {
				t.Fatal(err)
			}
			data += page
		}
	}
	return data
}

func fillRandom(r *rand.Rand, b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64() | 1 // never a zero page
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

// ChildFile copies parent to path (holes kept) and changes it the ways a
// fork child's RAM changes: pages rewritten, pages zeroed, pages written in
// holes. It returns the bytes of the child's private non-zero pages: what
// a delta upload should store.
func ChildFile(t testing.TB, parent, path string, changes int, seed uint64) int64 {
	t.Helper()
	src, err := os.Open(parent)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if _, err := sparsecopy.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	st, _ := dst.Stat()
	pages := st.Size() / page
	r := rand.New(rand.NewPCG(seed, seed+1))
	buf := make([]byte, page)
	touched := map[int64]bool{}
	var private int64
	for range changes {
		p := r.Int64N(pages)
		if touched[p] {
			continue
		}
		touched[p] = true
		if r.IntN(8) == 0 {
			clear(buf) // a page the child zeroed: stored as nothing
		} else {
			fillRandom(r, buf)
			private += page
		}
		if _, err := dst.WriteAt(buf, p*page); err != nil {
			t.Fatal(err)
		}
	}
	return private
}

// sameBytes fails unless a and b hold the same bytes.
func sameBytes(t testing.TB, a, b string) {
	t.Helper()
	if ha, hb := fileSum(t, a), fileSum(t, b); ha != hb {
		t.Fatalf("%s and %s differ", filepath.Base(a), filepath.Base(b))
	}
}

func fileSum(t testing.TB, p string) [32]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

// readerMatches fails unless r reads as the file at path, at offsets and
// lengths that cross pages, holes and chunk edges.
func readerMatches(t testing.TB, r io.ReaderAt, path string, size int64, seed uint64) {
	t.Helper()
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(seed, 7))
	for range 200 {
		off := rnd.Int64N(size)
		n := min(rnd.Int64N(3<<20)+1, size-off)
		got := make([]byte, n)
		if _, err := r.ReadAt(got, off); err != nil && err != io.EOF {
			t.Fatalf("ReadAt(%d, %d): %v", off, n, err)
		}
		if !bytes.Equal(got, want[off:off+n]) {
			t.Fatalf("ReadAt(%d, %d) differs from the file", off, n)
		}
	}
}

// rewriteTail writes new random pages over the last n bytes of path.
func rewriteTail(t testing.TB, path string, n int64, seed uint64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	r := rand.New(rand.NewPCG(seed, seed+2))
	buf := make([]byte, n)
	fillRandom(r, buf)
	if _, err := f.WriteAt(buf, st.Size()-n); err != nil {
		t.Fatal(err)
	}
}

// fetchesAs fetches file mem of m and fails unless it holds the bytes of
// the file at want.
func fetchesAs(t testing.TB, s *imagestore.Store, m *imagestore.Manifest, want string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "fetched")
	if err := s.FetchFile(context.Background(), m, "mem", out); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, want, out)
}
