package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/internal/guestread"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/server"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
)

// The Router is a node to the control plane and a cluster to the admin API.
var (
	_ control.Node          = (*Router)(nil)
	_ control.Cluster       = (*Router)(nil)
	_ control.NodeTemplates = (*Router)(nil)
	_ server.DataPlaneProxy = (*Router)(nil)
	_ guestread.Reads       = (*Router)(nil)
)

// fakeNode records the sandboxes it makes in the store as a node would,
// or refuses with full.
type fakeNode struct {
	control.Node
	id    string
	st    store.Store
	full  bool
	calls []string
}

func (f *fakeNode) Create(ctx context.Context, r *store.SandboxRecord) (*store.SandboxRecord, error) {
	f.calls = append(f.calls, "create")
	if f.full {
		return nil, fmt.Errorf("host %s: %w", f.id, errdefs.ErrNodeFull)
	}
	r.ID, r.Name, r.Host, r.State, r.CreatedAt = sandbox.NewID(sandbox.PrefixSandbox), sandbox.NewName(), f.id, sandbox.StateStarting, time.Now().UTC()
	return r, f.st.CreateSandboxes(ctx, r)
}

func (f *fakeNode) Clone(_ context.Context, parent string, kids []*store.SandboxRecord) (time.Duration, []*store.SandboxRecord, error) {
	f.calls = append(f.calls, "clone "+parent)
	return time.Millisecond, kids, nil
}

var master = []byte("the control plane's key, 32 bytes")

func TestRouter(t *testing.T) {
	ctx := context.Background()
	st := testenv.SQLite(t)
	nodes := map[string]*fakeNode{}
	for _, c := range []struct {
		id     string
		budget int
	}{{"big", 4096}, {"small", 2048}} {
		f := &fakeNode{id: c.id, st: st}
		nodes[c.id] = f
		key := new(nodeapi.CallKey)
		key.Set(CallKey(master, c.id))
		mux := http.NewServeMux()
		mux.Handle(nodeapi.Handler(f, nodeapi.NewDelivered(st), key, nil))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		st.UpdateNode(ctx, c.id, func(n *store.NodeRecord) error {
			n.URL, n.Region, n.Healthy, n.HeartbeatAt = srv.URL, "eu", true, time.Now()
			n.Capacity.MemoryBudgetMiB = c.budget
			return nil
		})
	}
	r := NewRouter(Options{Store: st, Nodes: st, Key: master, LostAfter: time.Minute})
	create := func() *store.SandboxRecord {
		t.Helper()
		made, err := r.Create(ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{AccountID: "acc_a", MemoryMiB: 1024}})
		if err != nil {
			t.Fatal(err)
		}
		return made
	}
	// big has 4096 free, then 3072, then small and big are tied at 2048…
	for i, want := range []string{"big", "big", "big", "small"} {
		if got := create(); got.Host != want {
			t.Fatalf("create %d on %s, want %s", i, got.Host, want)
		}
	}
	// A node that turns out full passes the create on.
	nodes["big"].full = true
	parent := create()
	if parent.Host != "small" {
		t.Fatalf("create past a full node on %s", parent.Host)
	}
	if n := len(nodes["big"].calls); nodes["big"].calls[n-1] != "create" {
		t.Fatalf("big was not asked first: %v", nodes["big"].calls)
	}
	// A fork goes to its parent's node, and not to a draining one.
	if _, _, err := r.Clone(ctx, parent.ID, []*store.SandboxRecord{{}}); err != nil {
		t.Fatal(err)
	}
	if c := nodes["small"].calls; c[len(c)-1] != "clone "+parent.ID {
		t.Fatalf("fork not on the parent's node: %v", c)
	}
	if _, err := r.Drain(ctx, "small", true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Clone(ctx, parent.ID, []*store.SandboxRecord{{}}); !errors.Is(err, errdefs.ErrNodeFull) {
		t.Fatalf("fork on a draining node: %v", err)
	}
	if _, err := r.Create(ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{AccountID: "acc_a", MemoryMiB: 1024}}); !errors.Is(err, errdefs.ErrNodeFull) {
		t.Fatalf("create with one node full and the other draining: %v", err)
	}
	if ok, _ := r.HasRegion(ctx, "eu"); !ok {
		t.Fatal("region eu")
	}
	if ok, _ := r.HasRegion(ctx, "us"); ok {
		t.Fatal("region us")
	}
}
