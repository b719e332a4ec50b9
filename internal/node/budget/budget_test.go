package budget

import (
	"errors"
	"testing"

	"github.com/zeish/zeish/errdefs"
)

// TestReserve: what is committed, what images keep in tmpfs and what is
// reserved all count against the limit; a release gives its memory back
// once however often it is called.
func TestReserve(t *testing.T) {
	tests := []struct {
		name            string
		limit           int
		committed, imgs int
		held            []int // MiB reserved first, kept
		released        []int // MiB reserved first, then released twice
		ask, count      int
		want            error
	}{
		{"no limit", 0, 1 << 20, 1 << 20, nil, nil, 512, 4, nil},
		{"fits", 1024, 256, 256, nil, nil, 256, 2, nil},
		{"committed and images count", 1024, 512, 256, nil, nil, 512, 1, errdefs.ErrNodeFull},
		{"reservations count", 1024, 0, 0, []int{600}, nil, 512, 1, errdefs.ErrNodeFull},
		{"released ones do not", 1024, 0, 0, nil, []int{600, 300}, 1000, 1, nil},
		{"count multiplies", 1024, 0, 0, nil, nil, 300, 4, errdefs.ErrNodeFull},
		{"committed unreadable", 1024, -1, 0, nil, nil, 1, 1, errStore},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(Options{Host: "node-1", ShmDir: t.TempDir(), LimitMiB: tt.limit,
				Committed: func() (int, error) {
					if tt.committed < 0 {
						return 0, errStore
					}
					return tt.committed, nil
				},
				ImageRAM: func() int { return tt.imgs }})
			for _, m := range tt.held {
				if _, err := b.Reserve(m, 1); err != nil {
					t.Fatal(err)
				}
			}
			for _, m := range tt.released {
				release, err := b.Reserve(m, 1)
				if err != nil {
					t.Fatal(err)
				}
				release()
				release()
			}
			_, err := b.Reserve(tt.ask, tt.count)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("reserve %d × %d MiB: %v, want %v", tt.count, tt.ask, err, tt.want)
			}
		})
	}
}

var errStore = errors.New("store down")

// A tmpfs without room for the new RAM (and its headroom) is
// storage_full, whatever the limit.
func TestReserveNeedsTmpfsRoom(t *testing.T) {
	b := New(Options{Host: "node-1", ShmDir: t.TempDir()})
	if _, err := b.Reserve(1<<40, 1); !errors.Is(err, errdefs.ErrStorageFull) {
		t.Fatalf("a TiB of RAM in a test's temp dir: %v, want storage_full", err)
	}
}
