package sparsecopy

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestCopyKeepsHoles(t *testing.T) {
	const size = 16 << 20
	tests := []struct {
		name   string
		writes map[int64][]byte // offset → data
		dirs   []string         // where src lives, where dst goes (tmpfs and disk)
	}{
		{"empty", nil, nil},
		{"a few pages", map[int64][]byte{0: []byte("head"), 10 << 20: bytes.Repeat([]byte{7}, 3*pageSize), size - 5: []byte("tail!")}, nil},
		{"zero pages written", map[int64][]byte{1 << 20: make([]byte, 2<<20), 4 << 20: []byte("x")}, nil},
		{"unaligned end", map[int64][]byte{size - 1: {1}}, nil},
	}
	dirs := []string{t.TempDir()}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "sparsecopy-test-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			dirs = append(dirs, d)
		}
	}
	for _, tt := range tests {
		for _, sd := range dirs {
			t.Run(tt.name+"/"+filepath.Base(sd), func(t *testing.T) {
				srcPath := filepath.Join(sd, tt.name+".src")
				dstPath := filepath.Join(t.TempDir(), "dst")
				src, err := os.Create(srcPath)
				if err != nil {
					t.Fatal(err)
				}
				defer os.Remove(srcPath)
				defer src.Close()
				src.Truncate(size)
				want := make([]byte, size)
				var data int64
				for off, b := range tt.writes {
					if _, err := src.WriteAt(b, off); err != nil {
						t.Fatal(err)
					}
					copy(want[off:], b)
					if !bytes.Equal(b, make([]byte, len(b))) {
						data += int64(len(b))
					}
				}
				dst, err := os.Create(dstPath)
				if err != nil {
					t.Fatal(err)
				}
				defer dst.Close()
				written, err := Copy(dst, src)
				if err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(dstPath)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("content differs (len %d, want %d)", len(got), len(want))
				}
				// Only the pages holding data may be written and allocated
				// (a page each side of an unaligned write, and the
				// filesystem's own granularity, allowed).
				limit := data + int64(len(tt.writes))*2*pageSize
				if written > limit {
					t.Errorf("wrote %d bytes, the data is %d", written, data)
				}
				alloc, err := Allocated(dstPath)
				if err != nil {
					t.Fatal(err)
				}
				if alloc > limit+int64(len(tt.writes))*64<<10 {
					t.Errorf("copy allocates %d bytes of a %d-byte file with %d bytes of data: holes lost", alloc, size, data)
				}
			})
		}
	}
}
