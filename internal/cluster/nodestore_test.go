package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/nodestore"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
)

// storeLab is a control plane whose Control service serves the store
// calls of 2.3 on a store that seals with a key the test holds, and the
// stores of two nodes that reach it with their own credentials.
type storeLab struct {
	*registry
	codec store.Codec
	a, b  *nodestore.Store
	dirA  string
	ctlA  nodestore.Control
}

func newStoreLab(t testing.TB) *storeLab {
	g := newRegistry(t, true)
	st, box := testenv.SQLiteSealed(t)
	g.st, g.reg.Nodes, g.reg.Store = st, st, st
	g.reg.Secrets = store.Codec{Secrets: box}
	l := &storeLab{registry: g, codec: g.reg.Secrets, dirA: t.TempDir()}
	l.ctlA = g.as(g.joined("node-a"))
	var err error
	if l.a, err = nodestore.New(l.ctlA, l.dirA, nil); err != nil {
		t.Fatal(err)
	}
	if l.b, err = nodestore.New(g.as(g.joined("node-b")), t.TempDir(), nil); err != nil {
		t.Fatal(err)
	}
	return l
}

// row is a sandbox the control plane recorded on node host.
func (l *storeLab) row(host string) *store.SandboxRecord {
	l.t.Helper()
	timeout := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: sandbox.NewID(sandbox.PrefixSandbox), Name: "sb-" + strings.ToLower(sandbox.NewID("x_"))[2:10],
		AccountID: "acc_1", State: sandbox.StateRunning, Host: host, MemoryMiB: 256, CreatedAt: time.Now().UTC(),
		MaxCostMicros: 5, TimeoutAt: &timeout, OnTimeout: "stop"}}
	if err := l.st.CreateSandboxes(context.Background(), r); err != nil {
		l.t.Fatal(err)
	}
	return r
}

func newRecord(host string) *store.SandboxRecord {
	id := sandbox.NewID(sandbox.PrefixSandbox)
	return &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: "n" + strings.ToLower(id[4:12]), AccountID: "acc_1",
		State: sandbox.StateStarting, Host: host, MemoryMiB: 256, CreatedAt: time.Now().UTC()}}
}

func TestNodeStoreReachesItsOwnSandboxesOnly(t *testing.T) {
	l := newStoreLab(t)
	ctx := context.Background()
	mine, theirs := l.row("node-a"), l.row("node-b")
	if _, err := l.a.GetSandbox(ctx, mine.ID); err != nil {
		t.Fatalf("node-a reads its own sandbox: %v", err)
	}
	touch := func(r *store.SandboxRecord) error { r.StateReason = "touched"; return nil }
	for name, err := range map[string]error{
		"get":    func() error { _, err := l.a.GetSandbox(ctx, theirs.ID); return err }(),
		"update": func() error { _, err := l.a.UpdateSandbox(ctx, theirs.ID, touch); return err }(),
		"snapshots": func() error {
			_, err := l.a.ListSnapshots(ctx, theirs.ID)
			return err
		}(),
	} {
		if !errdefs.Is(err, errdefs.ClassNotFound) {
			t.Errorf("node-a %s of node-b's sandbox: %v, want not_found", name, err)
		}
	}
	if cur, _ := l.st.GetSandbox(ctx, theirs.ID); cur.StateReason != "" {
		t.Fatalf("node-b's sandbox changed by node-a: %+v", cur.Sandbox)
	}
	list, err := l.a.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil || len(list) != 1 || list[0].ID != mine.ID {
		t.Fatalf("node-a lists %v (%v), want only %s", list, err, mine.ID)
	}
	// A node moves a sandbox onto itself only, and never to another account.
	for name, fn := range map[string]func(*store.SandboxRecord) error{
		"host":    func(r *store.SandboxRecord) error { r.Host = "node-b"; return nil },
		"account": func(r *store.SandboxRecord) error { r.AccountID = "acc_2"; return nil },
		"budget":  func(r *store.SandboxRecord) error { r.MaxCostMicros = 1 << 40; return nil },
		"timeout": func(r *store.SandboxRecord) error { r.TimeoutAt = nil; r.OnTimeout = ""; return nil },
		"size":    func(r *store.SandboxRecord) error { r.MemoryMiB *= 4; return nil },
	} {
		if _, err := l.a.UpdateSandbox(ctx, mine.ID, fn); errdefs.Of(err) != errdefs.ErrForbidden {
			t.Errorf("node-a changes its sandbox's %s: %v, want forbidden", name, err)
		}
	}
	if cur, _ := l.st.GetSandbox(ctx, mine.ID); cur.MemoryMiB != 256 || cur.MaxCostMicros != 5 || cur.TimeoutAt == nil {
		t.Fatalf("node-a's sandbox after refused writes: %+v", cur.Sandbox)
	}
	// Nor its snapshots, until a grant lends node-a node-b's sandbox (a
	// start or restore after node-b was lost), which it may then move onto
	// itself.
	if err := l.st.CreateSnapshot(ctx, &store.SnapshotRecord{Snapshot: sandbox.Snapshot{ID: "snp_theirs", SandboxID: theirs.ID,
		AccountID: "acc_1", Name: "s"}, Image: "img_s"}, 20); err != nil {
		t.Fatal(err)
	}
	if _, err := l.a.GetSnapshot(ctx, "snp_theirs"); !errdefs.Is(err, errdefs.ClassNotFound) {
		t.Fatalf("node-a reads node-b's snapshot: %v, want not_found", err)
	}
	l.a.Grant(GrantFor(master, "node-a", theirs.ID, time.Minute))
	if s, err := l.a.GetSnapshot(ctx, "snp_theirs"); err != nil || s.Image != "img_s" {
		t.Fatalf("node-a reads a snapshot of a sandbox granted to it: %+v %v", s, err)
	}
	moved, err := l.a.UpdateSandbox(ctx, theirs.ID, func(r *store.SandboxRecord) error { r.Host = "node-a"; return nil })
	if err != nil || moved.Host != "node-a" {
		t.Fatalf("node-a takes over a sandbox granted to it: %+v %v", moved, err)
	}
	// Grants of another node, of another sandbox or expired lend nothing.
	other := l.row("node-b")
	for name, g := range map[string]*nodev2.Grant{
		"another node's": GrantFor(master, "node-b", other.ID, time.Minute),
		"expired":        GrantFor(master, "node-a", other.ID, -time.Minute),
		"forged":         {SandboxId: other.ID, ExpiresUnix: time.Now().Add(time.Hour).Unix(), Mac: make([]byte, 32)},
	} {
		_, err := l.ctlA.GetSandbox(ctx, connect.NewRequest(&nodev2.StoreSandboxRef{SandboxId: other.ID, Grant: g}))
		if err := nodeapi.FromWire("control", err); !errdefs.Is(err, errdefs.ClassNotFound) {
			t.Errorf("node-a reads with %s grant: %v, want not_found", name, err)
		}
	}
}

func TestNodeStoreCreatesOnlyAdmittedRows(t *testing.T) {
	l := newStoreLab(t)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		rec   *store.SandboxRecord
		grant func(id string) *nodev2.Grant
	}{
		{"no grant", newRecord("node-a"), func(string) *nodev2.Grant { return nil }},
		{"node-b's grant", newRecord("node-a"), func(id string) *nodev2.Grant { return GrantFor(master, "node-b", id, time.Minute) }},
		{"another id's grant", newRecord("node-a"), func(string) *nodev2.Grant {
			return GrantFor(master, "node-a", sandbox.NewID(sandbox.PrefixSandbox), time.Minute)
		}},
		{"placed on node-b", newRecord("node-b"), func(id string) *nodev2.Grant { return GrantFor(master, "node-a", id, time.Minute) }},
	} {
		if g := c.grant(c.rec.ID); g != nil {
			l.a.Grant(g)
		}
		if err := l.a.CreateSandboxes(ctx, c.rec); errdefs.Of(err) != errdefs.ErrForbidden {
			t.Errorf("%s: create: %v, want forbidden", c.name, err)
		}
		if _, err := l.st.GetSandbox(ctx, c.rec.ID); !errdefs.Is(err, errdefs.ClassNotFound) {
			t.Errorf("%s: the row exists: %v", c.name, err)
		}
	}
	// Admitted: the row is written, with the secrets the control plane
	// sealed for its id (opened on the control plane); secrets sealed for
	// another id are refused.
	ok := newRecord("node-a")
	sealed, err := l.codec.Seal(ok.ID, map[string]string{"TOKEN": "t0p"})
	if err != nil {
		t.Fatal(err)
	}
	ok.SetSealedSecrets(sealed)
	forged := newRecord("node-a")
	forged.SetSealedSecrets(sealed)
	l.a.Grant(GrantFor(master, "node-a", ok.ID, time.Minute))
	l.a.Grant(GrantFor(master, "node-a", forged.ID, time.Minute))
	if err := l.a.CreateSandboxes(ctx, forged); errdefs.Of(err) != errdefs.ErrForbidden {
		t.Fatalf("create with another sandbox's sealed secrets: %v, want forbidden", err)
	}
	if err := l.a.CreateSandboxes(ctx, ok); err != nil {
		t.Fatal(err)
	}
	row, err := l.st.GetSandbox(ctx, ok.ID)
	if err != nil || row.SecretEnv["TOKEN"] != "t0p" || row.Host != "node-a" {
		t.Fatalf("admitted row: %+v %v", row, err)
	}
	// What a node reads carries no secrets, sealed or not.
	m, err := l.ctlA.GetSandbox(ctx, connect.NewRequest(&nodev2.StoreSandboxRef{SandboxId: ok.ID}))
	if err != nil || m.Msg.SealedSecrets != "" || strings.Contains(prototext.Format(m.Msg), "t0p") {
		t.Fatalf("a node reads secrets: %v %v", m, err)
	}
}

// racing is node-a's Control with a write of the control plane's slipped
// in before each of node-a's first n updates.
type racing struct {
	nodestore.Control
	l *storeLab
	n atomic.Int32
}

func (r *racing) UpdateSandbox(ctx context.Context, req *connect.Request[nodev2.StoreUpdateSandboxRequest]) (*connect.Response[nodev2.StoredSandbox], error) {
	if r.n.Add(-1) >= 0 {
		if _, err := r.l.st.UpdateSandbox(ctx, req.Msg.Read.Sandbox.Id, func(c *store.SandboxRecord) error {
			c.Metadata = map[string]string{"by": "control plane", "n": string(rune('0' + r.n.Load()))}
			c.UpdatedAt = time.Now().UTC().Add(time.Duration(r.n.Load()+1) * time.Second)
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return r.Control.UpdateSandbox(ctx, req)
}

func TestNodeStoreUpdateIsCompareAndSwap(t *testing.T) {
	l := newStoreLab(t)
	ctx := context.Background()
	r := l.row("node-a")

	// A write with a stale read is refused and changes nothing.
	read, err := l.ctlA.GetSandbox(ctx, connect.NewRequest(&nodev2.StoreSandboxRef{SandboxId: r.ID}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.st.UpdateSandbox(ctx, r.ID, func(c *store.SandboxRecord) error { c.StateReason = "control plane"; return nil }); err != nil {
		t.Fatal(err)
	}
	write := nodeapi.StoredToWire(&store.SandboxRecord{Sandbox: r.Sandbox})
	write.Sandbox.State = nodev2.State_STATE_STOPPED
	_, err = l.ctlA.UpdateSandbox(ctx, connect.NewRequest(&nodev2.StoreUpdateSandboxRequest{Read: read.Msg, Write: write}))
	if err := nodeapi.FromWire("control", err); !errdefs.Is(err, errdefs.ClassConflict) {
		t.Fatalf("a write over a stale read: %v, want a conflict", err)
	}
	if cur, _ := l.st.GetSandbox(ctx, r.ID); cur.State != sandbox.StateRunning || cur.StateReason != "control plane" {
		t.Fatalf("after a refused write: %+v", cur.Sandbox)
	}

	// Through the node's store, the conflict is read again and fn applied
	// again, keeping the control plane's write.
	for _, races := range []int{1, 3, nodestore.Retries + 1} {
		ctl := &racing{Control: l.ctlA, l: l}
		ctl.n.Store(int32(races))
		st, err := nodestore.New(ctl, l.dirA, nil)
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		got, err := st.UpdateSandbox(ctx, r.ID, func(c *store.SandboxRecord) error {
			calls++
			c.StateReason = "node"
			return nil
		})
		if races > nodestore.Retries {
			if !errdefs.Is(err, errdefs.ClassConflict) {
				t.Fatalf("%d races: %v, want the conflict after %d tries", races, err, nodestore.Retries+1)
			}
			continue
		}
		if err != nil || calls != races+1 || got.StateReason != "node" || got.Metadata["by"] != "control plane" {
			t.Fatalf("%d races: fn ran %d times, got %+v %v", races, calls, got, err)
		}
	}
}

func TestNodeStoreKeepsPrivateStateOnTheNode(t *testing.T) {
	l := newStoreLab(t)
	ctx := context.Background()
	rec := newRecord("node-a")
	h, _ := json.Marshal(map[string]any{"pid": 4242, "qmp": "/private/qmp.sock"})
	private := nodestore.Private{Handle: h, Disk: "/private/disk.qcow2", DiskBase: "/private/base",
		Kernel: "/private/vmlinuz", Initrd: "/private/initrd", KernelArgs: "console=private", Pristine: true, Gen: 7, NetKept: true}
	rec.MAC, rec.Handle, rec.Disk, rec.DiskBase = "52:54:00:aa:bb:cc", private.Handle, private.Disk, private.DiskBase
	rec.Kernel, rec.Initrd, rec.KernelArgs, rec.Pristine, rec.Gen, rec.NetKept = private.Kernel, private.Initrd, private.KernelArgs, true, 7, true
	rec.Layers, rec.ResumeImage = []string{"img_shared"}, "img_resume"

	// What crosses the wire holds none of it.
	text := prototext.Format(nodeapi.StoredToWire(rec))
	for _, v := range []string{"4242", "/private/"} {
		if strings.Contains(text, v) {
			t.Fatalf("the wire carries VM-private %q:\n%s", v, text)
		}
	}
	l.a.Grant(GrantFor(master, "node-a", rec.ID, time.Minute))
	if err := l.a.CreateSandboxes(ctx, rec); err != nil {
		t.Fatal(err)
	}
	// The control plane's row has none of it, but the images it places by.
	row, err := l.st.GetSandbox(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if row.Handle != nil || row.Disk != "" || row.Kernel != "" || row.Gen != 0 || row.Pristine {
		t.Fatalf("the shared row holds VM-private state: %+v", nodestore.PrivateOf(row))
	}
	if len(row.Layers) != 1 || row.ResumeImage != "img_resume" || row.MAC != "52:54:00:aa:bb:cc" {
		t.Fatalf("the shared row lost the images or the guest's MAC: %v %q %q", row.Layers, row.ResumeImage, row.MAC)
	}
	// The node reads it merged, before and after a restart (its data dir).
	check := func(st *nodestore.Store, when string) {
		got, err := st.GetSandbox(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if p := nodestore.PrivateOf(got); string(p.Handle) != string(h) || p.Gen != 7 || p.Disk != private.Disk || !p.NetKept {
			t.Fatalf("%s: the node reads %+v", when, p)
		}
	}
	check(l.a, "running")
	if _, err := l.a.UpdateSandbox(ctx, rec.ID, func(r *store.SandboxRecord) error { r.Gen = 7; r.State = sandbox.StateRunning; return nil }); err != nil {
		t.Fatal(err)
	}
	again, err := nodestore.New(l.ctlA, l.dirA, nil)
	if err != nil {
		t.Fatal(err)
	}
	check(again, "after a restart")
	// A destroyed sandbox leaves nothing in the data dir.
	if _, err := again.UpdateSandbox(ctx, rec.ID, func(r *store.SandboxRecord) error { r.State = sandbox.StateDestroyed; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(l.dirA, "sandboxes", rec.ID+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a destroyed sandbox's private state: %v", err)
	}
	// Another node sees nothing of it.
	if p, ok := (func() (nodestore.Private, bool) {
		other, _ := nodestore.OpenLocal(t.TempDir())
		return other.Sandbox(rec.ID)
	})(); ok {
		t.Fatalf("another data dir holds %+v", p)
	}
}

func TestNodeStoreRefusesWhatIsTheControlPlanes(t *testing.T) {
	l := newStoreLab(t)
	ctx := context.Background()
	for name, err := range map[string]error{
		"accounts": l.a.CreateAccount(ctx, store.Account{ID: "acc_x"}),
		"quotas":   l.a.InQuotaTx(ctx, "acc_1", time.Now(), func(store.QuotaTx) error { return nil }),
		"secrets":  func() error { _, err := l.a.GetAccountSecret(ctx, "acc_1", "x"); return err }(),
	} {
		if errdefs.Of(err) != errdefs.ErrUnavailable {
			t.Errorf("%s: %v, want unavailable", name, err)
		}
	}
	// Templates: every one readable, written only by the node holding it.
	held := sandbox.Template{ID: "tpl_b", Name: "b", AccountID: "acc_1", Host: "node-b", Kernel: "/b/vmlinuz"}
	if err := l.b.PutTemplate(ctx, held); err != nil {
		t.Fatal(err)
	}
	if got, err := l.a.GetTemplate(ctx, held.Key()); err != nil || got.Kernel != "" {
		t.Fatalf("node-a reads node-b's template: %+v %v (its paths are node-b's)", got, err)
	}
	if got, err := l.b.GetTemplate(ctx, held.Key()); err != nil || got.Kernel != "/b/vmlinuz" {
		t.Fatalf("node-b reads its template: %+v %v", got, err)
	}
	held.Host = "node-a"
	if err := l.a.PutTemplate(ctx, held); errdefs.Of(err) != errdefs.ErrForbidden {
		t.Fatalf("node-a takes node-b's template: %v", err)
	}
	if err := l.a.DeleteTemplate(ctx, held.Key()); errdefs.Of(err) != errdefs.ErrForbidden {
		t.Fatalf("node-a deletes node-b's template: %v", err)
	}
	if _, err := l.st.GetTemplate(ctx, held.Key()); err != nil {
		t.Fatal(errors.Join(errors.New("node-b's template is gone"), err))
	}
}

// The cost of a node's store going through the control plane: a read and
// an update (read, closure, compare-and-swap) over loopback Connect,
// against the same calls on the store directly.
func BenchmarkNodeStore(b *testing.B) {
	for _, c := range []struct {
		name string
		st   func(l *storeLab) store.Store
	}{
		{"direct", func(l *storeLab) store.Store { return l.st }},
		{"through the control plane", func(l *storeLab) store.Store { return l.a }},
	} {
		b.Run(c.name, func(b *testing.B) {
			l := newStoreLab(b)
			r := l.row("node-a")
			st, ctx := c.st(l), context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := st.GetSandbox(ctx, r.ID); err != nil {
					b.Fatal(err)
				}
				if _, err := st.UpdateSandbox(ctx, r.ID, func(r *store.SandboxRecord) error { r.NetIn++; return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
