// Package imagestoretest is the conformance suite every image store backend
// passes: the folder backend and a real S3 server (versitygw) the test
// starts on loopback. Nothing in it is a fake: damage is done to the
// stored bytes behind the store's back, crashes are processes killed, a
// full disk is a small tmpfs in the test's own mount namespace.
package imagestoretest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/blob"
	"github.com/zeish/zeish/internal/sparsecopy"
)

// Harness is one backend under test.
type Harness struct {
	// URL is the ZEISH_IMAGE_STORE value that opens the backend, in this
	// process or a helper (with Env added to its environment).
	URL string
	Env []string
	// Corrupt replaces the bytes of the object at key (relative to the
	// store's prefix) behind the store's back.
	Corrupt func(t *testing.T, key string, data []byte)
	// Unreachable is a URL of this kind whose store cannot be reached.
	Unreachable string
	// WrongCredentials is a URL whose store refuses the credentials ("":
	// the backend has none).
	WrongCredentials string
}

// Run runs the suite. newHarness gives each test a backend of its own.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"UploadFetch", testUploadFetch},
		{"ChildUploadsItsPages", testChildDelta},
		{"PutRefusesWrongDigest", testPutRefusesWrongDigest},
		{"DigestMismatch", testDigestMismatch},
		{"TruncatedChunk", testTruncatedChunk},
		{"DeletesRacingFetches", testDeletesRacingFetches},
		{"GCKeepsWhatIsReferenced", testGC},
		{"SweepDeletesWhatNothingRefersTo", testSweep},
		{"SweepRacingUploads", testSweepRacingUploads},
		{"SweepKilledMidway", testSweepKilledMidway},
		{"CancelMidUpload", testCancelMidUpload},
		{"KillMidUpload", testKillMidUpload},
		{"FullDiskOnFetch", testFullDisk},
		{"Unreachable", testUnreachable},
		{"WrongCredentials", testWrongCredentials},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newHarness(t)) })
	}
}

// pastTimestamps waits out the one-second resolution of S3 modification
// times, so chunks just stored are older than a tiny Grace when gc looks.
func pastTimestamps() { time.Sleep(1100 * time.Millisecond) }

// open opens h's store with a cache of its own in a temp folder.
func open(t *testing.T, h Harness, o imagestore.Options) *imagestore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := imagestore.OpenBackend(ctx, h.URL)
	if err != nil {
		t.Fatalf("open %s: %v", h.URL, err)
	}
	if o.Cache == nil {
		c, err := imagestore.OpenCache(filepath.Join(t.TempDir(), "cache"), 1<<30, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		o.Cache = c
	}
	return imagestore.New(b, o)
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

const ramSize = 16 << 20

// uploadRAM uploads a fresh RAM-shaped file as image id.
func uploadRAM(t *testing.T, s *imagestore.Store, id string, seed uint64) (string, *imagestore.Manifest) {
	t.Helper()
	path := filepath.Join(t.TempDir(), id+".mem")
	RAMFile(t, path, ramSize, seed)
	m, err := s.Upload(ctxFor(t), imagestore.UploadSpec{ID: id, Files: []imagestore.SourceFile{{Name: "mem", Path: path}}})
	if err != nil {
		t.Fatalf("upload %s: %v", id, err)
	}
	return path, m
}

func testUploadFetch(t *testing.T, h Harness) {
	s := open(t, h, imagestore.Options{})
	ctx := ctxFor(t)
	dir := t.TempDir()
	mem := filepath.Join(dir, "mem")
	data := RAMFile(t, mem, ramSize, 1)
	state := filepath.Join(dir, "state")
	if err := os.WriteFile(state, []byte(strings.Repeat("device state ", 5000)), 0o600); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Durable(ctx, "img_a"); err != nil || ok {
		t.Fatalf("Durable before upload = %v, %v; want false", ok, err)
	}
	u := s.StartUpload(ctx, imagestore.UploadSpec{ID: "img_a", Meta: []byte(`{"memory_mib":24}`),
		Files: []imagestore.SourceFile{{Name: "mem", Path: mem}, {Name: "state", Path: state}}})
	m, err := u.Wait()
	if err != nil {
		t.Fatal(err)
	}
	p := u.Progress()
	if !p.Planned || p.ChunksDone != p.Chunks || p.BytesDone != p.Bytes || p.Uploaded != p.Bytes {
		t.Errorf("progress at the end = %+v", p)
	}
	// Zero pages and holes are not stored.
	if stored := m.StoredBytes(); stored != data+65000 {
		t.Errorf("stored %d bytes; the file has %d of non-zero pages (+65000 of state)", stored, data)
	}
	if ok, err := s.Durable(ctx, "img_a"); err != nil || !ok {
		t.Fatalf("Durable after upload = %v, %v; want true", ok, err)
	}
	if string(m.Meta) != `{"memory_mib":24}` {
		t.Errorf("meta = %s", m.Meta)
	}
	// Fetched whole: the same bytes, holes kept.
	back, err := s.Manifest(ctx, "img_a")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "mem")
	if err := s.FetchFile(ctx, back, "mem", out); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, mem, out)
	if alloc, _ := sparsecopy.Allocated(out); alloc > data+1<<20 {
		t.Errorf("fetched file allocates %d bytes for %d of data: holes not kept", alloc, data)
	}
	// Read lazily: the same bytes, at any offset.
	r, err := s.Reader(ctx, back, "mem", nil)
	if err != nil {
		t.Fatal(err)
	}
	readerMatches(t, r, mem, ramSize, 2)
	// Uploading it again stores nothing.
	m2, err := s.Upload(ctx, imagestore.UploadSpec{ID: "img_b", Files: []imagestore.SourceFile{{Name: "mem", Path: mem}}})
	if err != nil {
		t.Fatal(err)
	}
	if m2.StoredBytes() != data {
		t.Errorf("img_b stores %d bytes, want %d", m2.StoredBytes(), data)
	}
}

func testChildDelta(t *testing.T, h Harness) {
	s := open(t, h, imagestore.Options{})
	ctx := ctxFor(t)
	parentPath, _ := uploadRAM(t, s, "img_parent", 3)
	for i, local := range []bool{true, false} {
		t.Run(fmt.Sprintf("parent local %v", local), func(t *testing.T) {
			id := fmt.Sprintf("img_child_%v", local)
			childPath := filepath.Join(t.TempDir(), "child.mem")
			private := ChildFile(t, parentPath, childPath, 300, uint64(4+i))
			src := imagestore.SourceFile{Name: "mem", Path: childPath}
			if local {
				src.ParentPath = parentPath
			}
			u := s.StartUpload(ctx, imagestore.UploadSpec{ID: id, Parent: "img_parent", Files: []imagestore.SourceFile{src}})
			m, err := u.Wait()
			if err != nil {
				t.Fatal(err)
			}
			p := u.Progress()
			t.Logf("child: %d bytes of private pages, %d uploaded, %d shared with the parent", private, p.Uploaded, p.Shared)
			if p.Uploaded > private+private/10 {
				t.Errorf("uploaded %d bytes for %d of private pages (more than +10%%)", p.Uploaded, private)
			}
			if m.Parent != "img_parent" {
				t.Errorf("parent = %q", m.Parent)
			}
			fetchesAs(t, s, m, childPath)
		})
	}
}

func testPutRefusesWrongDigest(t *testing.T, h Harness) {
	s := open(t, h, imagestore.Options{})
	ctx := ctxFor(t)
	body := []byte("the bytes that were sent")
	var wrong [32]byte
	copy(wrong[:], "the digest of some other bytes!")
	err := s.Backend().Put(ctx, "chunks/test/wrong", body, wrong)
	if !errors.Is(err, blob.ErrBadDigest) {
		t.Fatalf("put with a wrong digest = %v; want ErrBadDigest", err)
	}
	if _, err := s.Backend().Stat(ctx, "chunks/test/wrong"); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("after a refused put: stat = %v; want not found", err)
	}
}

// damage uploads an image, damages one of its chunks with f and checks
// that neither a whole fetch nor a lazy read uses the damaged bytes.
func damage(t *testing.T, h Harness, f func([]byte) []byte) {
	s := open(t, h, imagestore.Options{})
	ctx := ctxFor(t)
	_, m := uploadRAM(t, s, "img_victim", 5)
	victim := m.Chunks[len(m.Chunks)/2]
	b, err := s.Backend().Get(ctx, "chunks/"+victim.Digest[:2]+"/"+victim.Digest, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	h.Corrupt(t, "chunks/"+victim.Digest[:2]+"/"+victim.Digest, f(b))
	out := filepath.Join(t.TempDir(), "mem")
	err = s.FetchFile(ctx, m, "mem", out)
	if !errors.Is(err, imagestore.ErrCorrupt) || !errors.Is(err, errdefs.ErrInternal) {
		t.Fatalf("fetch with a damaged chunk = %v; want ErrCorrupt", err)
	}
	if left, _ := os.ReadDir(filepath.Dir(out)); len(left) != 0 {
		t.Errorf("a failed fetch left %v behind", left)
	}
	r, err := s.Reader(ctx, m, "mem", nil)
	if err != nil {
		t.Fatal(err)
	}
	var at int64 = -1
	for _, e := range m.Files[0].Extents {
		if m.Chunks[e.Chunk].Digest == victim.Digest {
			at = e.Off
			break
		}
	}
	if _, err := r.ReadAt(make([]byte, 4096), at); !errors.Is(err, imagestore.ErrCorrupt) {
		t.Fatalf("lazy read of a damaged chunk = %v; want ErrCorrupt", err)
	}
}

func testDigestMismatch(t *testing.T, h Harness) {
	damage(t, h, func(b []byte) []byte {
		b = append([]byte(nil), b...)
		b[len(b)/2] ^= 0xff // same length, one byte flipped
		return b
	})
}

func testTruncatedChunk(t *testing.T, h Harness) {
	damage(t, h, func(b []byte) []byte { return b[:len(b)/3] })
}

// testDeletesRacingFetches deletes and collects a parent image while its
// child (sharing most of its chunks) and itself are fetched: the child's
// fetches always succeed, the parent's succeed or say the image is gone,
// and none ever returns wrong bytes.
func testDeletesRacingFetches(t *testing.T, h Harness) {
	s := open(t, h, imagestore.Options{Grace: time.Nanosecond, GCWindow: 20 * time.Second})
	ctx := ctxFor(t)
	parentPath, pm := uploadRAM(t, s, "img_p", 6)
	childPath := filepath.Join(t.TempDir(), "child")
	ChildFile(t, parentPath, childPath, 200, 7)
	// The child rewrites the parent's last windows whole, so chunks only
	// the parent uses exist for gc to take.
	rewriteTail(t, childPath, 3*imagestore.WindowSize, 8)
	cm, err := s.Upload(ctx, imagestore.UploadSpec{ID: "img_c", Parent: "img_p", Files: []imagestore.SourceFile{{Name: "mem", Path: childPath}}})
	if err != nil {
		t.Fatal(err)
	}
	// Readers without a cache, so every read goes to the store.
	b, err := imagestore.OpenBackend(ctx, h.URL)
	if err != nil {
		t.Fatal(err)
	}
	bare := imagestore.New(b, imagestore.Options{})
	var wg sync.WaitGroup
	var parentOK, parentGone atomic.Int64
	stop := make(chan struct{})
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				out := filepath.Join(t.TempDir(), fmt.Sprintf("c%d-%d", i, n))
				if err := bare.FetchFile(ctx, cm, "mem", out); err != nil {
					t.Errorf("child fetch while its parent is deleted: %v", err)
					return
				}
				sameBytes(t, childPath, out)
				os.Remove(out)
				out = filepath.Join(t.TempDir(), fmt.Sprintf("p%d-%d", i, n))
				switch err := bare.FetchFile(ctx, pm, "mem", out); {
				case err == nil:
					sameBytes(t, parentPath, out)
					os.Remove(out)
					parentOK.Add(1)
				case errors.Is(err, blob.ErrNotFound) && errors.Is(err, errdefs.ErrNotFound):
					parentGone.Add(1)
				default:
					t.Errorf("parent fetch while it is deleted: %v; want success or not found", err)
					return
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	if err := s.Delete(ctx, "img_p"); err != nil {
		t.Fatal(err)
	}
	pastTimestamps()
	st, err := s.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Until a parent fetch has met the deletion (each loop takes a while
	// on a loaded host), or long enough to say the race never happened.
	for deadline := time.Now().Add(60 * time.Second); parentGone.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("gc: %+v; parent fetches: %d whole, %d found deleted", st, parentOK.Load(), parentGone.Load())
	if st.Deleted == 0 {
		t.Errorf("gc deleted none of the parent's own chunks")
	}
	if parentGone.Load() == 0 {
		t.Errorf("no parent fetch ever saw the deletion: the race was not exercised")
	}
	// The child is whole after the collection.
	fetchesAs(t, bare, cm, childPath)
}

func testGC(t *testing.T, h Harness) {
	s := open(t, h, imagestore.Options{Grace: time.Nanosecond, LeaseTTL: time.Hour})
	ctx := ctxFor(t)
	_, a := uploadRAM(t, s, "img_keep", 8)
	_, b := uploadRAM(t, s, "img_drop", 9)
	_, c := uploadRAM(t, s, "img_held", 10)
	hold, err := s.Hold(ctx, c, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"img_drop", "img_held"} {
		if err := s.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	pastTimestamps()
	st, err := s.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Deleted != len(b.Chunks) {
		t.Errorf("gc deleted %d chunks; img_drop had %d: %+v", st.Deleted, len(b.Chunks), st)
	}
	// The kept image, and the deleted one a node still holds, read whole.
	for _, m := range []*imagestore.Manifest{a, c} {
		if err := s.FetchFile(ctx, m, "mem", filepath.Join(t.TempDir(), "mem")); err != nil {
			t.Errorf("%s after gc: %v", m.ID, err)
		}
	}
	// Released, the held image's chunks go at the next run.
	if err := hold.Release(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = s.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Deleted != len(c.Chunks) {
		t.Errorf("after release gc deleted %d chunks; img_held had %d: %+v", st.Deleted, len(c.Chunks), st)
	}
	// A store with a young grace keeps unreferenced chunks.
	young := open(t, h, imagestore.Options{Grace: time.Hour})
	_, d := uploadRAM(t, young, "img_young", 11)
	if err := young.Delete(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	if st, err := young.GC(ctx); err != nil || st.Deleted != 0 || st.YoungChunks != len(d.Chunks) {
		t.Errorf("gc within the grace period: %+v, %v; want nothing deleted, %d young", st, err, len(d.Chunks))
	}
}

func testCancelMidUpload(t *testing.T, h Harness) {
	s := open(t, h, imagestore.Options{Parallel: 2})
	path := filepath.Join(t.TempDir(), "mem")
	RAMFile(t, path, 32<<20, 12)
	spec := imagestore.UploadSpec{ID: "img_cut", Files: []imagestore.SourceFile{{Name: "mem", Path: path}}}
	ctx, cancel := context.WithCancel(context.Background())
	u := s.StartUpload(ctx, spec)
	for u.Progress().ChunksDone < 5 {
		select {
		case <-u.Done():
			t.Fatal("upload ended before it could be cut")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	if _, err := u.Wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cut upload = %v; want canceled", err)
	}
	cut := u.Progress()
	ctx = ctxFor(t)
	if ok, err := s.Durable(ctx, "img_cut"); err != nil || ok {
		t.Fatalf("a cut upload is durable = %v, %v", ok, err)
	}
	u = s.StartUpload(ctx, spec)
	m, err := u.Wait()
	if err != nil {
		t.Fatal(err)
	}
	again := u.Progress()
	t.Logf("cut after %d of %d bytes; the resumed upload put %d", cut.Uploaded, again.Bytes, again.Uploaded)
	if again.Uploaded >= again.Bytes || again.Uploaded > again.Bytes-cut.Uploaded {
		t.Errorf("resumed upload put %d bytes of %d; %d were stored before the cut", again.Uploaded, again.Bytes, cut.Uploaded)
	}
	fetchesAs(t, s, m, path)
}
