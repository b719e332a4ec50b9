package cluster

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
)

// fakeDurability answers Durable from a set, or fails.
type fakeDurability struct {
	durable map[string]bool
	err     error
	asked   []string
}

func (f *fakeDurability) Durable(_ context.Context, id string) (bool, error) {
	f.asked = append(f.asked, id)
	return f.durable[id], f.err
}

// startNode records the starts and restores that reach it.
type startNode struct{ fakeNode }

func (f *startNode) Start(_ context.Context, id string) (*store.SandboxRecord, error) {
	f.calls = append(f.calls, "start "+id)
	return f.st.GetSandbox(context.Background(), id)
}

func (f *startNode) Restore(_ context.Context, snapID string) (*store.SnapshotRecord, *store.SandboxRecord, error) {
	f.calls = append(f.calls, "restore "+snapID)
	s, err := f.st.GetSnapshot(context.Background(), snapID)
	if err != nil {
		return nil, nil, err
	}
	r, err := f.st.GetSandbox(context.Background(), s.SandboxID)
	return s, r, err
}

// TestImageOfALostNodeNotDurableFailsAtOnce: a start or a restore of an
// image whose node is lost is refused at once, not_found and saying why, when the image store does not hold the image; it goes to another
// node when the store holds it, or when the store cannot say (that node
// then waits, bounded). While the image's node is live it goes there.
func TestImageOfALostNodeNotDurableFailsAtOnce(t *testing.T) {
	ctx := context.Background()
	st := testenv.SQLite(t)
	other := &startNode{fakeNode{id: "other", st: st}}
	key := new(nodeapi.CallKey)
	key.Set(CallKey(master, "other"))
	mux := http.NewServeMux()
	mux.Handle(nodeapi.Handler(other, nodeapi.NewDelivered(st), key, nil))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	register := func(id, url string, heartbeat time.Time) {
		st.UpdateNode(ctx, id, func(n *store.NodeRecord) error {
			n.URL, n.Healthy, n.HeartbeatAt = url, true, heartbeat
			n.Protocol = nodeapi.Format(nodeapi.ProtocolMajor, nodeapi.ProtocolMinor)
			n.Capacity.MemoryBudgetMiB = 4096
			return nil
		})
	}
	register("other", srv.URL, time.Now())
	register("gone", "http://127.0.0.1:1", time.Now().Add(-time.Hour))
	stopped := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_stopped", Name: "s", AccountID: "acc_a", Host: "gone",
		State: sandbox.StateStopped, MemoryMiB: 512}, ResumeImage: "img_resume"}
	snapped := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_snapped", Name: "p", AccountID: "acc_a", Host: "gone",
		State: sandbox.StateError, MemoryMiB: 512}}
	if err := st.CreateSandboxes(ctx, stopped, snapped); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSnapshot(ctx, &store.SnapshotRecord{Snapshot: sandbox.Snapshot{ID: "snap_1", SandboxID: "sbx_snapped",
		AccountID: "acc_a", Name: "s1"}, Image: "img_snap"}, sandbox.MaxSnapshots); err != nil {
		t.Fatal(err)
	}
	start := func(r *Router) error { _, err := r.Start(ctx, "sbx_stopped"); return err }
	restore := func(r *Router) error { _, _, err := r.Restore(ctx, "snap_1"); return err }
	for _, tc := range []struct {
		name    string
		images  *fakeDurability // nil: no image store
		call    func(*Router) error
		refused string // the error's words; "": the other node is asked
	}{
		{"start, not durable", &fakeDurability{}, start, "the saved state of sandbox sbx_stopped was not yet durable in the image store when node gone was lost"},
		{"restore, not durable", &fakeDurability{}, restore, "the image of snapshot snap_1 was not yet durable in the image store when node gone was lost"},
		{"start, durable", &fakeDurability{durable: map[string]bool{"img_resume": true}}, start, ""},
		{"restore, durable", &fakeDurability{durable: map[string]bool{"img_snap": true}}, restore, ""},
		{"start, the store cannot say", &fakeDurability{err: errors.New("store down")}, start, ""},
		{"start, no image store", nil, start, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Store: st, Nodes: st, Key: master, LostAfter: time.Minute}
			if tc.images != nil {
				o.Images = tc.images
			}
			other.calls = nil
			err := tc.call(NewRouter(o))
			if tc.refused == "" {
				if err != nil || len(other.calls) != 1 {
					t.Fatalf("err %v, calls on the other node %v; want the other node asked", err, other.calls)
				}
				return
			}
			if code, msg := errdefs.Public(err); code != "not_found" || !strings.Contains(msg, tc.refused) {
				t.Fatalf("err = %v; want not_found saying %q to the client", err, tc.refused)
			}
			if len(other.calls) != 0 {
				t.Fatalf("the other node was asked anyway: %v", other.calls)
			}
		})
	}
	// Its node live again: the start goes there, without asking the store
	// (its upload may still be under way). The call itself fails (the
	// fake at that URL has another node's call key); the store is not
	// asked either way.
	register("gone", srv.URL, time.Now())
	images := &fakeDurability{}
	NewRouter(Options{Store: st, Nodes: st, Key: master, LostAfter: time.Minute, Images: images}).Start(ctx, "sbx_stopped")
	if len(images.asked) != 0 {
		t.Fatalf("the store was asked about an image whose node is live: %v", images.asked)
	}
}

// TestDeleteOnALostNode: a sandbox or a snapshot whose node is lost is
// deleted in the records (nothing else can be asked): the sandbox
// destroyed with no saved state and its snapshots gone, so nothing names
// their images any more. While the node is live, the node is asked.
func TestDeleteOnALostNode(t *testing.T) {
	ctx := context.Background()
	st := testenv.SQLite(t)
	for id, beat := range map[string]time.Time{"gone": time.Now().Add(-time.Hour), "here": time.Now()} {
		st.UpdateNode(ctx, id, func(n *store.NodeRecord) error {
			n.URL, n.Healthy, n.HeartbeatAt = "http://127.0.0.1:1", true, beat
			return nil
		})
	}
	mk := func(id, host string, state sandbox.State) {
		t.Helper()
		r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: id, AccountID: "acc_a", Host: host, State: state}, ResumeImage: "img_" + id,
			Handle: []byte(`{"pid": 4242}`)}
		if err := st.CreateSandboxes(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := st.CreateSnapshot(ctx, &store.SnapshotRecord{Snapshot: sandbox.Snapshot{ID: "snp_" + id, SandboxID: id, AccountID: "acc_a",
			Name: "s"}, Image: "img_snap_" + id}, sandbox.MaxSnapshots); err != nil {
			t.Fatal(err)
		}
	}
	mk("sbx_stopped", "gone", sandbox.StateStopped)
	mk("sbx_lost", "gone", sandbox.StateError)
	mk("sbx_here", "here", sandbox.StateStopped)
	r := NewRouter(Options{Store: st, Nodes: st, Key: master, LostAfter: time.Minute})

	rec, err := r.Delete(ctx, "sbx_stopped")
	if err != nil || rec.State != sandbox.StateDestroyed || rec.ResumeImage != "" || rec.DestroyedAt == nil || rec.Handle != nil {
		t.Fatalf("delete of a stopped sandbox on a lost node: %+v %v; want destroyed without saved state or VM handle", rec, err)
	}
	if _, err := st.GetSnapshot(ctx, "snp_sbx_stopped"); !errdefs.Is(err, errdefs.ClassNotFound) {
		t.Fatalf("its snapshot: %v; want deleted with it", err)
	}
	if err := r.DeleteSnapshot(ctx, "snp_sbx_lost"); err != nil {
		t.Fatalf("delete of a lost node's snapshot: %v", err)
	}
	if _, err := st.GetSnapshot(ctx, "snp_sbx_lost"); !errdefs.Is(err, errdefs.ClassNotFound) {
		t.Fatalf("the snapshot after its delete: %v", err)
	}
	// A live node is asked (here it does not answer: nothing changes).
	if _, err := r.Delete(ctx, "sbx_here"); err == nil {
		t.Fatal("a delete on a live node that does not answer succeeded")
	}
	if err := r.DeleteSnapshot(ctx, "snp_sbx_here"); err == nil {
		t.Fatal("a snapshot delete on a live node that does not answer succeeded")
	}
	if rec, _ := st.GetSandbox(ctx, "sbx_here"); rec.State != sandbox.StateStopped || rec.ResumeImage == "" {
		t.Fatalf("a sandbox of a live node changed without it: %+v", rec)
	}
	if _, err := st.GetSnapshot(ctx, "snp_sbx_here"); err != nil {
		t.Fatalf("a snapshot of a live node went without it: %v", err)
	}
}
