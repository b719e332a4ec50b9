package imagestore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/zeish/zeish/errdefs"
)

func TestWindowsOf(t *testing.T) {
	for _, tc := range []struct {
		spans []span
		want  []int64
	}{
		{nil, nil},
		{[]span{{0, 1}}, []int64{0}},
		{[]span{{WindowSize - 1, 2}}, []int64{0, WindowSize}},
		{[]span{{0, 10}, {100, 10}, {3 * WindowSize, WindowSize + 1}}, []int64{0, 3 * WindowSize, 4 * WindowSize}},
	} {
		if got := windowsOf(tc.spans); !equalInts(got, tc.want) {
			t.Errorf("windowsOf(%v) = %v, want %v", tc.spans, got, tc.want)
		}
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRemakeChunk cuts a window again, as an upload does for a chunk that
// left the store while it ran: the same bytes, or an error if the file
// changed.
func TestRemakeChunk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	data := bytes.Repeat([]byte{0, 0, 0, 0, 7, 7, 7, 7}, WindowSize/8*3) // 3 windows
	data = append(data, 1, 2, 3)                                         // a partial last page
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var chunks []newChunk
	file, err := newPlanner().planFile("f", 0, f, nil, func(c newChunk) error { chunks = append(chunks, c); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 4 || file.Size != int64(len(data)) {
		t.Fatalf("%d chunks, size %d; want 4 (one per window), %d", len(chunks), file.Size, len(data))
	}
	for _, c := range chunks {
		again, err := remakeChunk(newChunk{ref: c.ref, file: c.file, window: c.window}, f, nil)
		if err != nil || !bytes.Equal(again, c.data) {
			t.Fatalf("remake window %d: %v (same bytes %v)", c.window, err, bytes.Equal(again, c.data))
		}
	}
	w, _ := os.OpenFile(path, os.O_WRONLY, 0)
	w.WriteAt([]byte{9}, WindowSize+4)
	w.Close()
	if _, err := remakeChunk(chunks[1], f, nil); !errors.Is(err, errdefs.ErrInvalidState) {
		t.Fatalf("remake after the file changed: %v; want invalid_state", err)
	}
}
