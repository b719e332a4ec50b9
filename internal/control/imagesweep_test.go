package control

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/blob/folder"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// TestSweepImagesKeepsWhatRecordsName runs the control plane's sweep over
// a real image store (a folder) and real records (SQLite): what a
// snapshot, a stopped sandbox or a template names stays, with what it
// stands on; what a lost node left behind, a deleted sandbox's saved state
// and a deleted template's files go, and gc frees their bytes.
func TestSweepImagesKeepsWhatRecordsName(t *testing.T) {
	ctx := context.Background()
	stopped := sbx("sbx_stopped", sandbox.StateStopped)
	stopped.ResumeImage, stopped.Template = "img_resume", "tpl_used"
	gone := sbx("sbx_gone", sandbox.StateDestroyed)
	gone.ResumeImage = "img_of_deleted_sandbox"
	c, _ := fixture(t, stopped, gone)
	if err := c.store.CreateSnapshot(ctx, &store.SnapshotRecord{Snapshot: sandbox.Snapshot{ID: "snap_1", SandboxID: "sbx_gone",
		AccountID: "acc_a", Name: "s1", CreatedAt: time.Now()}, Image: "img_snap"}, sandbox.MaxSnapshots); err != nil {
		t.Fatal(err)
	}
	for _, tpl := range []sandbox.Template{
		{ID: "tpl_ready", Name: "ready", AccountID: "acc_a", State: sandbox.TemplateReady, Warm: &sandbox.TemplateWarm{Image: "img_warm"}},
		{ID: "tpl_used", Name: "used", AccountID: "acc_a", State: sandbox.TemplateDeleted}, // a sandbox stands on it
		{ID: "tpl_gone", Name: "gone", AccountID: "acc_a", State: sandbox.TemplateDeleted}, // none does
	} {
		if err := c.store.PutTemplate(ctx, tpl); err != nil {
			t.Fatal(err)
		}
	}
	b, err := folder.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	needs := func(m *imagestore.Manifest) ([]string, error) {
		var meta struct{ Layers []string }
		err := json.Unmarshal(m.Meta, &meta)
		return meta.Layers, err
	}
	is := imagestore.New(b, imagestore.Options{Grace: time.Nanosecond, SweepGrace: time.Nanosecond, Needs: needs})
	c.sweeper = is
	upload := func(id string, layers ...string) {
		path := filepath.Join(t.TempDir(), id)
		if err := os.WriteFile(path, []byte("the bytes of "+id), 0o600); err != nil {
			t.Fatal(err)
		}
		meta, _ := json.Marshal(map[string]any{"layers": layers})
		if _, err := is.Upload(ctx, imagestore.UploadSpec{ID: id, Meta: meta, Files: []imagestore.SourceFile{{Name: "disk", Path: path}}}); err != nil {
			t.Fatal(err)
		}
	}
	upload("img_layer")
	upload("img_resume", "img_layer")
	upload("img_snap")
	upload("img_warm")
	upload(imagestore.TemplateImage("tpl_ready"))
	upload(imagestore.TemplateImage("tpl_used"))
	upload(imagestore.TemplateImage("tpl_gone"))
	upload("img_of_deleted_sandbox")
	upload("img_of_a_lost_node")
	time.Sleep(3200 * time.Millisecond) // past the grace and the store's slack

	st, gst, err := c.SweepImagesOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sweep %+v; gc %+v", st, gst)
	left, err := is.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(left)
	want := []string{"img_layer", "img_resume", "img_snap", "img_warm", "tpl-tpl_ready", "tpl-tpl_used"}
	if !slices.Equal(left, want) {
		t.Errorf("after the sweep the store holds %v; want %v", left, want)
	}
	if st.Swept != 3 || gst.Deleted != 3 {
		t.Errorf("swept %d images and gc deleted %d chunks; want 3 and 3", st.Swept, gst.Deleted)
	}
	m := is.Metrics()
	if n := testutil.ToFloat64(m.SweptImages); n != 3 {
		t.Errorf("zeish_image_sweep_images_total = %v; want 3", n)
	}
	if n := testutil.ToFloat64(m.FreedBytes); n != float64(gst.DeletedBytes) || n == 0 {
		t.Errorf("zeish_image_gc_freed_bytes_total = %v; gc deleted %d bytes", n, gst.DeletedBytes)
	}
}

// countingSweeper counts the sweeps that reached it.
type countingSweeper struct {
	mu     sync.Mutex
	sweeps int
}

func (s *countingSweeper) Sweep(ctx context.Context, refs imagestore.Referenced) (imagestore.SweepStats, error) {
	if _, err := refs(ctx); err != nil {
		return imagestore.SweepStats{}, err
	}
	s.mu.Lock()
	s.sweeps++
	s.mu.Unlock()
	return imagestore.SweepStats{}, nil
}

func (s *countingSweeper) GC(context.Context) (imagestore.GCStats, error) {
	return imagestore.GCStats{}, nil
}

func (s *countingSweeper) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sweeps
}

// TestOneReplicaSweeps: two replicas on one database, each with its sweep
// loop: only the one holding the lease sweeps.
func TestOneReplicaSweeps(t *testing.T) {
	c, _ := fixture(t)
	other := New(Options{Store: c.store, Node: c.node, Replica: "replica-b"})
	a, b := &countingSweeper{}, &countingSweeper{}
	c.sweeper, other.sweeper = a, b
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range []*Control{c, other} {
		wg.Add(1)
		go func() { defer wg.Done(); r.SweepImages(ctx, 20*time.Millisecond) }()
	}
	for deadline := time.Now().Add(30 * time.Second); a.count()+b.count() < 10 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	t.Logf("sweeps: replica a %d, replica b %d", a.count(), b.count())
	if a.count()+b.count() < 10 || (a.count() > 0 && b.count() > 0) {
		t.Fatalf("sweeps by replica: %d and %d; want them all by one", a.count(), b.count())
	}
}
