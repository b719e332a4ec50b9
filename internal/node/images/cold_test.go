package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/zeish/zeish/vmm"
)

// sweep is one call of ColdTracker.pick in a scenario.
type sweep struct {
	at    time.Duration // since the scenario's start
	cands []coldCandidate
	want  []string // images picked to move
}

func TestColdTrackerPicks(t *testing.T) {
	idle := func(id string) coldCandidate { return coldCandidate{id: id} }
	leased := coldCandidate{id: "a", leased: true}
	mapped := coldCandidate{id: "a", mapped: true}
	tests := []struct {
		name   string
		after  time.Duration
		sweeps []sweep
	}{
		{"first sight starts the clock", time.Minute, []sweep{
			{0, []coldCandidate{idle("a")}, nil},
			{59 * time.Second, []coldCandidate{idle("a")}, nil},
			{time.Minute, []coldCandidate{idle("a")}, []string{"a"}},
		}},
		{"disabled", 0, []sweep{
			{0, []coldCandidate{idle("a")}, nil},
			{time.Hour, []coldCandidate{idle("a")}, nil},
		}},
		{"leased never moves and restarts the clock", time.Minute, []sweep{
			{0, []coldCandidate{idle("a")}, nil},
			{2 * time.Minute, []coldCandidate{leased}, nil},
			{2*time.Minute + 59*time.Second, []coldCandidate{idle("a")}, nil},
			{3 * time.Minute, []coldCandidate{idle("a")}, []string{"a"}},
		}},
		{"mapped never moves and restarts the clock", time.Minute, []sweep{
			{0, []coldCandidate{idle("a")}, nil},
			{5 * time.Minute, []coldCandidate{mapped}, nil},
			{5*time.Minute + 30*time.Second, []coldCandidate{idle("a")}, nil},
			{6 * time.Minute, []coldCandidate{idle("a")}, []string{"a"}},
		}},
		{"each image on its own clock", time.Minute, []sweep{
			{0, []coldCandidate{idle("a")}, nil},
			{30 * time.Second, []coldCandidate{idle("a"), idle("b")}, nil},
			{time.Minute, []coldCandidate{idle("a"), idle("b")}, []string{"a"}},
			{90 * time.Second, []coldCandidate{idle("b")}, []string{"b"}},
		}},
		{"an image gone and back starts over", time.Minute, []sweep{
			{0, []coldCandidate{idle("a")}, nil},
			{30 * time.Second, nil, nil},
			{time.Minute, []coldCandidate{idle("a")}, nil},
			{2 * time.Minute, []coldCandidate{idle("a")}, []string{"a"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewColdTracker(tt.after)
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i, s := range tt.sweeps {
				got := tr.pick(start.Add(s.at), s.cands)
				if !slices.Equal(got, s.want) {
					t.Fatalf("sweep %d at %v: picked %v, want %v", i, s.at, got, s.want)
				}
			}
		})
	}
}

// TestRecoverSettlesInterruptedMoves: whatever moment a move between
// tmpfs and disk was cut at, Recover leaves exactly one whole copy.
func TestRecoverSettlesInterruptedMoves(t *testing.T) {
	tests := []struct {
		name                         string
		shm, shmTemp, cold, coldTemp bool
		wantShm, wantCold            bool
	}{
		{"cut while copying to disk", true, false, false, true, true, false},
		{"cut after the rename to disk", true, false, true, false, true, false},
		{"moved", false, false, true, false, false, true},
		{"cut while copying back", false, true, true, false, false, true},
		{"cut after the rename back", true, false, true, false, true, false},
		{"in tmpfs", true, false, false, false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			m := r.image()
			os.Remove(m.VM.MemFile)
			cold := filepath.Join(r.s.Dir(m.ID), coldFile)
			write := func(on bool, path string) {
				if on {
					if err := os.WriteFile(path, []byte("ram"), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			write(tt.shm, m.VM.MemFile)
			write(tt.shmTemp, m.VM.MemFile+thawSuffix)
			write(tt.cold, cold)
			write(tt.coldTemp, filepath.Join(r.s.Dir(m.ID), coldTemp))
			r.crash()
			r.s.Recover()
			if got := exists(m.VM.MemFile); got != tt.wantShm {
				t.Errorf("tmpfs copy exists: %v, want %v", got, tt.wantShm)
			}
			if got := exists(cold); got != tt.wantCold {
				t.Errorf("disk copy exists: %v, want %v", got, tt.wantCold)
			}
			for _, p := range []string{m.VM.MemFile + thawSuffix, filepath.Join(r.s.Dir(m.ID), coldTemp)} {
				if exists(p) {
					t.Errorf("temp copy %s left", p)
				}
			}
		})
	}
}

// TestSweepMovesIdleImagesOnly: a sweep moves an image idle for
// ColdAfter to the cold tier (tmpfs file gone, disk copy whole), and
// leaves one a lease holds or a VM maps.
func TestSweepMovesIdleImagesOnly(t *testing.T) {
	r := newRig(t)
	idle, leased, mapped := r.image(), r.image(), r.image()
	for _, m := range []*Meta{idle, leased, mapped} {
		os.WriteFile(m.VM.MemFile, []byte("memory of "+m.ID), 0o600)
	}
	lease := r.s.Lease(leased.ID)
	defer lease.Release()
	r.refs.mapped = map[string]bool{mapped.ID: true}
	tr := NewColdTracker(time.Minute)
	now := time.Now()
	r.s.SweepCold(r.ctx, tr, now)
	r.s.SweepCold(r.ctx, tr, now.Add(time.Minute))
	for _, tt := range []struct {
		m    *Meta
		cold bool
	}{{idle, true}, {leased, false}, {mapped, false}} {
		coldPath := filepath.Join(r.s.Dir(tt.m.ID), coldFile)
		if exists(coldPath) != tt.cold || exists(tt.m.VM.MemFile) == tt.cold {
			t.Errorf("image %s: on disk %v, in tmpfs %v; want on disk %v", tt.m.ID, exists(coldPath), exists(tt.m.VM.MemFile), tt.cold)
		}
	}
	if got := r.s.ColdMiB(); got != 1 {
		t.Errorf("ColdMiB = %d, want 1 (one small image, rounded up)", got)
	}
	if err := r.s.Thaw(r.ctx, idle.VM); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(idle.VM.MemFile); string(b) != "memory of "+idle.ID {
		t.Fatalf("thawed memory %q", b)
	}
	if exists(filepath.Join(r.s.Dir(idle.ID), coldFile)) {
		t.Fatal("disk copy left after the thaw")
	}
}

// fakeTier holds the memory of the images in has (id → bytes); err, if
// set, is what its Fetch fails with.
type fakeTier struct {
	has     map[string][]byte
	err     error
	fetched []string
}

func (f *fakeTier) Name() string                         { return "fake" }
func (f *fakeTier) Put(_ context.Context, m *Meta) error { return errors.New("not used") }
func (f *fakeTier) Drop(id string) error                 { delete(f.has, id); return nil }
func (f *fakeTier) Fetch(_ context.Context, img *vmm.Image) error {
	id := filepath.Base(img.Dir)
	if f.err != nil {
		return f.err
	}
	b, ok := f.has[id]
	if !ok {
		return fmt.Errorf("no copy of %s: %w", id, fs.ErrNotExist)
	}
	f.fetched = append(f.fetched, id)
	return os.WriteFile(img.MemFile, b, 0o600)
}

// TestThawAsksTiersInOrder: memory in tmpfs needs no tier; otherwise the
// cold tier first, then the others in order; a tier that fails for
// another reason than holding nothing ends the thaw; none holding it is an
// error that says so.
func TestThawAsksTiersInOrder(t *testing.T) {
	tests := []struct {
		name        string
		inShm, cold bool
		remote      []byte
		remoteErr   error
		want        string // the memory after the thaw ("": an error)
		wantFetched bool   // the remote tier was used
		wantErr     error
	}{
		{"in tmpfs", true, false, []byte("remote"), nil, "tmpfs", false, nil},
		{"cold first", false, true, []byte("remote"), nil, "cold", false, nil},
		{"remote when not cold", false, false, []byte("remote"), nil, "remote", true, nil},
		{"nowhere", false, false, nil, nil, "", false, fs.ErrNotExist},
		{"remote fails", false, false, []byte("remote"), errStorage, "", false, errStorage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			remote := &fakeTier{has: map[string][]byte{}, err: tt.remoteErr}
			r := newRig(t, remote)
			m := r.image()
			os.Remove(m.VM.MemFile)
			if tt.inShm {
				os.WriteFile(m.VM.MemFile, []byte("tmpfs"), 0o600)
			}
			if tt.cold {
				os.WriteFile(filepath.Join(r.s.Dir(m.ID), coldFile), []byte("cold"), 0o600)
			}
			if tt.remote != nil {
				remote.has[m.ID] = tt.remote
			}
			err := r.s.Thaw(r.ctx, m.VM)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("thaw: %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(m.VM.MemFile); !bytes.Equal(b, []byte(tt.want)) {
				t.Errorf("memory after the thaw %q, want %q", b, tt.want)
			}
			if got := len(remote.fetched) > 0; got != tt.wantFetched {
				t.Errorf("remote tier fetched = %v, want %v", got, tt.wantFetched)
			}
		})
	}
}

var errStorage = errors.New("storage broke")

// TestCollectDropsTierCopies: gc releasing an image's memory drops every
// tier's copy of it too.
func TestCollectDropsTierCopies(t *testing.T) {
	remote := &fakeTier{has: map[string][]byte{}}
	r := newRig(t, remote)
	m := r.image()
	cold := filepath.Join(r.s.Dir(m.ID), coldFile)
	os.WriteFile(cold, []byte("cold"), 0o600)
	remote.has[m.ID] = []byte("remote")
	r.refs.layers = []string{m.ID} // its layer stays, its memory goes
	r.s.Collect(r.ctx)
	if exists(cold) || remote.has[m.ID] != nil {
		t.Fatalf("tier copies of released memory kept: cold %v, remote %v", exists(cold), remote.has[m.ID] != nil)
	}
}
