//go:build linux

package guest

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
)

func TestFileRoundTrip(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	data := make([]byte, 3<<20+17)
	rand.Read(data)
	path := filepath.Join(t.TempDir(), "new", "dirs", "blob.bin")

	fi, err := c.WriteFile(ctxT(t, 10*time.Second), path, 0o600, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != int64(len(data)) || fi.Perm != 0o600 || fi.Path != path {
		t.Errorf("write info = %+v", fi)
	}
	r, fi, err := c.ReadFile(ctxT(t, 10*time.Second), path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(data)) || fi.Size != n || !bytes.Equal(h.Sum(nil), sha256Sum(data)) {
		t.Fatalf("read %d bytes (info %d), sha256 differs or size wrong", n, fi.Size)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temp files left behind: %v", entries)
	}
}

func sha256Sum(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("source broke")
	}
	n := min(len(p), f.n)
	f.n -= n
	return n, nil
}

func TestWriteFileSourceFails(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	dir := t.TempDir()
	_, err := c.WriteFile(ctxT(t, 5*time.Second), filepath.Join(dir, "f"), 0, &failingReader{n: 100 << 10})
	if err == nil || !strings.Contains(err.Error(), "source broke") {
		t.Fatalf("err = %v, want the source's error", err)
	}
	// The guest removes its temp file when it sees the aborted upload.
	deadline := time.Now().Add(2 * time.Second)
	for entries, _ := os.ReadDir(dir); len(entries) > 0; entries, _ = os.ReadDir(dir) {
		if time.Now().After(deadline) {
			t.Fatalf("files left after a failed upload: %v", entries)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFileOps(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	root := t.TempDir()
	p := func(s string) string { return filepath.Join(root, s) }
	os.WriteFile(p("file"), []byte("12345"), 0o640)
	os.Symlink("file", p("link"))
	ctx := ctxT(t, 10*time.Second)

	steps := []struct {
		name string
		do   func() error
		want error
	}{
		{"mkdir without parents", func() error { _, err := c.Mkdir(ctx, p("a/b"), false); return err }, errdefs.ErrFileNotFound},
		{"mkdir with parents", func() error { _, err := c.Mkdir(ctx, p("a/b/c"), true); return err }, nil},
		{"mkdir existing", func() error { _, err := c.Mkdir(ctx, p("a/b/c"), false); return err }, errdefs.ErrFileExists},
		{"mkdir parents existing", func() error { _, err := c.Mkdir(ctx, p("a/b/c"), true); return err }, nil},
		{"mkdir relative", func() error { _, err := c.Mkdir(ctx, "rel/dir", true); return err }, errdefs.ErrInvalidArgument},
		{"stat missing", func() error { _, err := c.Stat(ctx, p("missing")); return err }, errdefs.ErrFileNotFound},
		{"stat relative", func() error { _, err := c.Stat(ctx, "file"); return err }, errdefs.ErrInvalidArgument},
		{"list missing", func() error { _, err := c.List(ctx, p("missing")); return err }, errdefs.ErrFileNotFound},
		{"list a file", func() error { _, err := c.List(ctx, p("file")); return err }, errdefs.ErrInvalidArgument},
		{"read missing", func() error { _, _, err := c.ReadFile(ctx, p("missing")); return err }, errdefs.ErrFileNotFound},
		{"read a directory", func() error { _, _, err := c.ReadFile(ctx, root); return err }, errdefs.ErrInvalidArgument},
		{"remove missing", func() error { return c.Remove(ctx, p("missing"), true) }, errdefs.ErrFileNotFound},
		{"remove non-empty dir", func() error { return c.Remove(ctx, p("a"), false) }, errdefs.ErrInvalidArgument},
		{"remove recursive", func() error { return c.Remove(ctx, p("a"), true) }, nil},
		{"gone after remove", func() error { _, err := c.Stat(ctx, p("a")); return err }, errdefs.ErrFileNotFound},
	}
	for _, s := range steps {
		if err := s.do(); !errors.Is(err, s.want) || (s.want == nil) != (err == nil) {
			t.Errorf("%s: err = %v, want %v", s.name, err, s.want)
		}
	}

	fi, err := c.Stat(ctx, p("link"))
	if err != nil || fi.Symlink != "file" || fi.Mode[0] != 'L' {
		t.Errorf("stat link = %+v, %v", fi, err)
	}
	fi, err = c.Stat(ctx, p("file"))
	if err != nil || fi.Size != 5 || fi.Perm != 0o640 || fi.IsDir || fi.Name != "file" {
		t.Errorf("stat file = %+v, %v", fi, err)
	}
	list, err := c.List(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != "file,link" {
		t.Errorf("list = %v", names)
	}
}

// A result bigger than one data chunk (a long listing, a long process list)
// must arrive whole: results are decoded from a single chunk.
func TestListLargerThanAChunk(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	root := t.TempDir()
	const files = 600 // ~100 bytes of JSON each: about twice maxChunk
	for i := range files {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("entry-with-a-long-name-%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	list, err := c.List(ctxT(t, 10*time.Second), root)
	if err != nil || len(list) != files {
		t.Fatalf("list: %d entries, %v; want %d", len(list), err, files)
	}
}
