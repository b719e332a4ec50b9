package imagestoretest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/blob"
)

// The sweep's cases: images in these tests carry what they stand on in
// their meta ({"needs": [...]}), as a node's images carry their disk chain.

type sweepMeta struct {
	Needs []string `json:"needs"`
}

func needsOf(m *imagestore.Manifest) ([]string, error) {
	var meta sweepMeta
	if len(m.Meta) == 0 {
		return nil, nil
	}
	err := json.Unmarshal(m.Meta, &meta)
	return meta.Needs, err
}

// pastSweepSlack waits until what was stored before is older than a tiny
// SweepGrace plus the slack a sweep allows for the store's one-second
// modification times.
func pastSweepSlack() { time.Sleep(3200 * time.Millisecond) }

// sweepOptions are a store's options for the sweep's cases: every image
// old enough once pastSweepSlack returns.
func sweepOptions() imagestore.Options {
	return imagestore.Options{Grace: time.Nanosecond, SweepGrace: time.Nanosecond, GCWindow: 20 * time.Second, Needs: needsOf}
}

// uploadSmall uploads a small image of random bytes standing on needs.
func uploadSmall(t *testing.T, s *imagestore.Store, id string, needs ...string) *imagestore.Manifest {
	t.Helper()
	path := filepath.Join(t.TempDir(), id)
	b := make([]byte, 64<<10)
	rand.Read(b)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	meta, _ := json.Marshal(sweepMeta{Needs: needs})
	m, err := s.Upload(ctxFor(t), imagestore.UploadSpec{ID: id, Meta: meta, Files: []imagestore.SourceFile{{Name: "disk", Path: path}}})
	if err != nil {
		t.Fatalf("upload %s: %v", id, err)
	}
	return m
}

// images lists the store's images, sorted.
func images(t *testing.T, s *imagestore.Store) []string {
	t.Helper()
	ids, err := s.Images(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

func refs(ids ...string) imagestore.Referenced {
	return func(context.Context) (map[string]bool, error) {
		out := map[string]bool{}
		for _, id := range ids {
			out[id] = true
		}
		return out, nil
	}
}

// testSweep: an image nothing refers to goes once older than the grace,
// and gc then frees its chunks; what a record names, what a record's image
// stands on, what a node claims and what is young stay, whole.
func testSweep(t *testing.T, h Harness) {
	s := open(t, h, sweepOptions())
	ctx := ctxFor(t)
	kept := []*imagestore.Manifest{
		uploadSmall(t, s, "img_base"),                       // a layer under img_snap
		uploadSmall(t, s, "img_snap", "img_base"),           // a snapshot's image
		uploadSmall(t, s, "img_held"),                       // a node holds it, no record yet
		uploadSmall(t, s, "img_layer"),                      // under an image a node holds
		uploadSmall(t, s, "img_fork", "img_layer"),          // a node holds it
		uploadSmall(t, s, "tpl-t1"),                         // a template
		uploadSmall(t, s, "img_stale_claim_but_referenced"), // named by a record
	}
	orphan := uploadSmall(t, s, "img_orphan", "img_base") // its record was deleted; it stands on a kept layer
	lost := uploadSmall(t, s, "img_of_a_lost_node")       // claimed by a node whose claim went stale
	if _, err := s.Claim(ctx, "node-1", []string{"img_held", "img_fork", "img_never_uploaded"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "node-gone", []string{lost.ID}); err != nil {
		t.Fatal(err)
	}
	pastSweepSlack()
	// node-1 renews its claim; node-gone does not, and its claim is now
	// older than the grace.
	if _, err := s.Claim(ctx, "node-1", []string{"img_held", "img_fork", "img_never_uploaded"}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Sweep(ctx, refs("img_snap", "tpl-t1", "img_stale_claim_but_referenced", "img_deleted_long_ago"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sweep: %+v", st)
	want := []string{}
	for _, m := range kept {
		want = append(want, m.ID)
	}
	slices.Sort(want)
	if got := images(t, s); !slices.Equal(got, want) {
		t.Fatalf("after the sweep the store holds %v; want %v", got, want)
	}
	if st.Swept != 2 || st.Referenced != 4 || st.Claimed != 3 || st.Claims != 1 {
		t.Errorf("sweep stats %+v; want 2 swept, 4 referenced, 3 claimed, 1 fresh claim", st)
	}
	// The chunks only the swept images listed go at the next gc; the kept
	// images read whole.
	gst, err := s.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gst.Deleted != len(orphan.Chunks)+len(lost.Chunks) {
		t.Errorf("gc after the sweep deleted %d chunks; the swept images had %d", gst.Deleted, len(orphan.Chunks)+len(lost.Chunks))
	}
	for _, m := range kept {
		if err := s.FetchFile(ctx, m, "disk", filepath.Join(t.TempDir(), "disk")); err != nil {
			t.Errorf("%s after the sweep and gc: %v", m.ID, err)
		}
	}
	// A store with the default grace keeps an unreferenced image that
	// was just uploaded: the record naming it may be on its way.
	young := open(t, h, imagestore.Options{Needs: needsOf})
	uploadSmall(t, young, "img_young")
	if st, err := young.Sweep(ctx, refs()); err != nil || st.Swept != 0 || st.Young == 0 {
		t.Errorf("sweep within the grace period: %+v, %v; want nothing swept", st, err)
	}
	// A record that cannot be read sweeps nothing.
	if _, err := s.Sweep(ctx, func(context.Context) (map[string]bool, error) { return nil, fmt.Errorf("database down") }); err == nil {
		t.Errorf("a sweep whose records could not be read succeeded")
	}
	if got := images(t, s); len(got) != len(want)+1 {
		t.Errorf("a failed sweep changed the store: %v", got)
	}
}

// testSweepRacingUploads sweeps and collects without a pause while nodes
// upload images no record names yet, each claimed before its upload begins
// as a node does: every image survives, whole. Unclaimed, the next sweep
// takes them all (so the claims are what kept them).
func testSweepRacingUploads(t *testing.T, h Harness) {
	// Chunks keep their usual grace: an upload's own chunks are covered by
	// it until its lease names them (gc.go), which is not what this tests.
	o := sweepOptions()
	o.Grace = time.Hour
	s := open(t, h, o)
	ctx := ctxFor(t)
	stop, stopSweeps := make(chan struct{}), make(chan struct{})
	var wg, sweeper sync.WaitGroup
	var sweeps, gcs int
	sweeper.Add(1)
	go func() {
		defer sweeper.Done()
		for {
			select {
			case <-stopSweeps:
				return
			default:
			}
			if _, err := s.Sweep(ctx, refs()); err != nil {
				t.Errorf("sweep: %v", err)
				return
			}
			sweeps++
			if _, err := s.GC(ctx); err != nil {
				t.Errorf("gc: %v", err)
				return
			}
			gcs++
		}
	}()
	var mu sync.Mutex
	var claimed []string
	var made []*imagestore.Manifest
	var paths []string
	for node := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("node-%d", node)
			// The node renews its claim (a node: every ClaimEvery, far
			// shorter than SweepGrace; here the grace is the sweep's
			// two-second slack).
			var mineMu sync.Mutex
			var mine []string
			renewed := make(chan struct{})
			defer func() { <-renewed }()
			go func() {
				defer close(renewed)
				for {
					select {
					case <-stop:
						return
					case <-time.After(300 * time.Millisecond):
					}
					mineMu.Lock()
					ids := slices.Clone(mine)
					mineMu.Unlock()
					if _, err := s.Claim(ctx, holder, ids); err != nil {
						t.Errorf("renew claim: %v", err)
						return
					}
				}
			}()
			for i := range 4 {
				id := fmt.Sprintf("img_n%d_%d", node, i)
				var needs []string
				mineMu.Lock()
				if i > 0 {
					needs = []string{mine[i-1]} // a chain, as re-forks make
				}
				mine = append(mine, id)
				ids := slices.Clone(mine)
				mineMu.Unlock()
				if err := s.ClaimAndWait(ctx, holder, ids); err != nil {
					t.Error(err)
					return
				}
				path := filepath.Join(t.TempDir(), id)
				RAMFile(t, path, 4<<20, uint64(100+10*node+i))
				meta, _ := json.Marshal(sweepMeta{Needs: needs})
				m, err := s.Upload(ctx, imagestore.UploadSpec{ID: id, Meta: meta, Files: []imagestore.SourceFile{{Name: "mem", Path: path}}})
				if err != nil {
					t.Errorf("upload %s: %v", id, err)
					return
				}
				mu.Lock()
				made, paths, claimed = append(made, m), append(paths, path), append(claimed, id)
				mu.Unlock()
			}
		}()
	}
	// Until both nodes are done; the sweeper goes on meanwhile.
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		n := len(made)
		mu.Unlock()
		if n == 8 || t.Failed() {
			break
		}
	}
	// Sweeps go on past the slack: every image is old enough to go but
	// for its claim.
	pastSweepSlack()
	close(stopSweeps)
	sweeper.Wait()
	if st, err := s.Sweep(ctx, refs()); err != nil || st.Swept != 0 {
		t.Errorf("a sweep after the uploads: %+v, %v; want the claimed images kept", st, err)
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d sweeps and %d gc runs raced 8 uploads", sweeps, gcs)
	if sweeps < 2 {
		t.Fatalf("only %d sweeps ran during the uploads: no race", sweeps)
	}
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	for i, m := range made {
		fetchesAs(t, s, m, paths[i])
	}
	// Without their claims, nothing keeps them.
	pastSweepSlack()
	for node := range 2 {
		if err := s.Unclaim(ctx, fmt.Sprintf("node-%d", node)); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := s.Sweep(ctx, refs()); err != nil || st.Swept != len(claimed) {
		t.Errorf("a sweep once unclaimed: %+v, %v; want all %d swept", st, err, len(claimed))
	}
}

// testSweepKilledMidway kills a sweep (SIGKILL, in a helper process whose
// deletes are slowed) after it deleted some of the images it meant to:
// the store is consistent (every remaining image reads whole; gc frees
// only the deleted ones' chunks), and the next sweep finishes the job.
func testSweepKilledMidway(t *testing.T, h Harness) {
	s := open(t, h, sweepOptions())
	ctx := ctxFor(t)
	keep := uploadSmall(t, s, "img_keep")
	var doomed []*imagestore.Manifest
	for i := range 6 {
		// Each shares the kept image's chunk (same file) and has one of its own.
		doomed = append(doomed, uploadShared(t, s, fmt.Sprintf("img_doomed_%d", i), keep))
	}
	pastSweepSlack()
	deleted := 0
	killHelperWhen(t, helper(t, h, "sweep", "REFS="+keep.ID), func(line string) bool {
		if strings.HasPrefix(line, "deleted ") {
			deleted++
		}
		return deleted == 2
	})
	left := images(t, s)
	t.Logf("sweep killed after %d deletes; the store holds %v", deleted, left)
	if deleted != 2 || len(left) <= 1 || len(left) >= 1+len(doomed) {
		t.Fatalf("the sweep was not cut midway: %d deletes seen, %d images left", deleted, len(left))
	}
	// Consistent: every image still there reads whole, and a gc (whose
	// run may meet the killed sweep's announcement) keeps their chunks.
	gst, err := s.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gc after the killed sweep: %+v", gst)
	for _, m := range append([]*imagestore.Manifest{keep}, doomed...) {
		if !slices.Contains(left, m.ID) {
			continue
		}
		if err := s.FetchFile(ctx, m, "disk", filepath.Join(t.TempDir(), "disk")); err != nil {
			t.Errorf("%s after a killed sweep and a gc: %v", m.ID, err)
		}
	}
	if gst.Deleted != 2 {
		t.Errorf("gc deleted %d chunks; the 2 swept images had one of their own each", gst.Deleted)
	}
	// The next sweep finishes.
	st, err := s.Sweep(ctx, refs(keep.ID))
	if err != nil {
		t.Fatal(err)
	}
	if got := images(t, s); !slices.Equal(got, []string{keep.ID}) || st.Swept != len(left)-1 {
		t.Errorf("after the next sweep: %v (%+v); want only %s", got, st, keep.ID)
	}
	if err := s.FetchFile(ctx, keep, "disk", filepath.Join(t.TempDir(), "disk")); err != nil {
		t.Errorf("the kept image: %v", err)
	}
}

// uploadShared uploads an image of two files: the kept image's (its chunk
// shared) and one of its own.
func uploadShared(t *testing.T, s *imagestore.Store, id string, with *imagestore.Manifest) *imagestore.Manifest {
	t.Helper()
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared")
	if err := s.FetchFile(ctxFor(t), with, "disk", shared); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(dir, "own")
	b := make([]byte, 16<<10)
	rand.Read(b)
	if err := os.WriteFile(own, b, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := s.Upload(ctxFor(t), imagestore.UploadSpec{ID: id, Files: []imagestore.SourceFile{{Name: "disk", Path: shared}, {Name: "own", Path: own}}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// helperSweep sweeps the store keeping REFS, its manifest deletes slowed
// and each printed, until it ends or is killed.
func helperSweep() {
	b, err := imagestore.OpenBackend(context.Background(), os.Getenv("ZEISH_IMAGE_STORE"))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	o := sweepOptions()
	o.GCWindow = 2 * time.Minute
	s := imagestore.New(slowDeletes{b}, o)
	st, err := s.Sweep(context.Background(), refs(strings.Split(os.Getenv("REFS"), ",")...))
	fmt.Printf("done: %+v %v\n", st, err)
}

// slowDeletes is the real backend with each manifest delete printed and
// slowed, so a kill lands between two.
type slowDeletes struct{ blob.Backend }

func (b slowDeletes) Delete(ctx context.Context, key string) error {
	if !strings.HasPrefix(key, "manifests/") {
		return b.Backend.Delete(ctx, key)
	}
	err := b.Backend.Delete(ctx, key)
	fmt.Println("deleted", key, err)
	time.Sleep(time.Second)
	return err
}
