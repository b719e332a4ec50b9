package images

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCollect checks which parts of which images a collection keeps: an
// image's memory and state while a record needs it whole or a lease holds
// it, its layer while a disk chain goes through it, nothing otherwise.
func TestCollect(t *testing.T) {
	r := newRig(t)
	whole, layer, unused, leased := r.image(), r.image(), r.image(), r.image()
	lease := r.s.Lease(leased.ID)
	defer lease.Release()
	r.refs.whole = []string{whole.ID}
	r.refs.layers = []string{layer.ID, whole.ID}
	r.s.Collect(r.ctx)
	tests := []struct {
		name           string
		m              *Meta
		memory, folder bool
		layer          bool
	}{
		{"needed whole", whole, true, true, true},
		{"only a layer in a chain", layer, false, true, true},
		{"needed by nothing", unused, false, false, false},
		{"held by a lease", leased, true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := exists(tt.m.VM.MemFile) && exists(tt.m.VM.StateFile); got != tt.memory {
				t.Errorf("memory and state kept = %v, want %v", got, tt.memory)
			}
			if got := exists(tt.m.Disk); got != tt.layer {
				t.Errorf("layer kept = %v, want %v", got, tt.layer)
			}
			if got := exists(r.s.Dir(tt.m.ID)); got != tt.folder {
				t.Errorf("folder kept = %v, want %v", got, tt.folder)
			}
			if m, err := r.s.Read(tt.m.ID); tt.folder && !tt.memory && (err != nil || m.VM != nil) {
				t.Errorf("a layer-only image still records memory: %+v, %v", m, err)
			}
		})
	}
}

// TestLeasesAcrossACrash: a lease keeps an image being made (no
// image.json, or no referrer yet) from a collection; a crash drops every
// lease, so the first collection after it removes what only a lease kept,
// and keeps what a record names.
func TestLeasesAcrossACrash(t *testing.T) {
	tests := []struct {
		name       string
		record     bool // image.json written before the crash
		referenced bool // a record names it
		wantKept   bool
	}{
		{"folder only, nobody's", false, false, false},
		{"complete, nobody's", true, false, false},
		{"complete, a record names it", true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			id, dir, lease, err := r.s.Create()
			if err != nil {
				t.Fatal(err)
			}
			ram := filepath.Join(dir, "ram")
			if err := os.WriteFile(ram, []byte("guest memory"), 0o600); err != nil {
				t.Fatal(err)
			}
			if tt.record {
				if err := r.s.Write(&Meta{ID: id}); err != nil {
					t.Fatal(err)
				}
			}
			if tt.referenced {
				r.refs.whole = []string{id}
			}
			r.s.Collect(r.ctx)
			if !exists(ram) {
				t.Fatal("a collection removed a leased image")
			}
			_ = lease // held by the operation the crash ends: never released
			r.crash()
			r.s.Collect(r.ctx)
			if got := exists(dir); got != tt.wantKept {
				t.Fatalf("after the crash, image kept = %v, want %v", got, tt.wantKept)
			}
		})
	}
}

// A lease released while a collection reads the referrers may belong to an
// operation that has just recorded the image in a row the read missed: it
// is kept that round, and collected the next if nothing names it.
func TestCollectKeepsAnImageReleasedDuringIt(t *testing.T) {
	r := newRig(t)
	id, dir, lease, err := r.s.Create()
	if err != nil {
		t.Fatal(err)
	}
	r.refs.during = lease.Release
	r.s.Collect(r.ctx)
	if !exists(dir) {
		t.Fatal("an image released during the collection was removed")
	}
	r.refs.during = nil
	r.s.Collect(r.ctx)
	if exists(dir) {
		t.Fatalf("image %s, released and named by nothing, survived the next collection", id)
	}
}

// Releasing a lease twice releases it once: another lease on the same
// image still holds it.
func TestLeaseReleaseIsIdempotent(t *testing.T) {
	r := newRig(t)
	m := r.image()
	a, b := r.s.Lease(m.ID), r.s.Lease(m.ID)
	a.Release()
	a.Release()
	if !r.s.Leased(m.ID) {
		t.Fatal("a double release let go of another lease")
	}
	b.Release()
	if r.s.Leased(m.ID) {
		t.Fatal("still leased after every lease was released")
	}
	var none *Lease
	none.Release() // a nil lease is a no-op
}
