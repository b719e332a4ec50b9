package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
	"github.com/zeish/zeish/vmm/vmmfake"
)

// The node's tests run it on the fake driver (vmm/vmmfake) and the real
// SQLite store: every operation goes through the same code as with QEMU,
// in milliseconds, and failures can be injected at each driver step.

// harness is a node on a fake driver, a SQLite store and temp dirs.
type harness struct {
	t    *testing.T
	ctx  context.Context
	n    *Node
	st   *flakyStore
	drv  *vmmfake.Driver
	tpl  *fakeTemplates
	opts Options
	// armed, when set, arms a failure right before an operation whose
	// setup must not fail (harness.inject).
	armed func(*harness)
}

// fakeTemplates serves one built template whose files exist; fail makes
// Get fail (a template that cannot be built).
type fakeTemplates struct {
	mu   sync.Mutex // set while the node may Get (the ready pool's keeper does)
	tpl  sandbox.Template
	fail error
}

func (f *fakeTemplates) Get(_ context.Context, name string) (sandbox.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return sandbox.Template{}, f.fail
	}
	return f.tpl, nil
}

// set replaces the template served.
func (f *fakeTemplates) set(tpl sandbox.Template) {
	f.mu.Lock()
	f.tpl = tpl
	f.mu.Unlock()
}

func newHarness(t *testing.T, edit ...func(*Options)) *harness {
	t.Helper()
	ctx := context.Background()
	dir, shm, art := t.TempDir(), t.TempDir(), t.TempDir()
	st := openStore(t, dir)
	drv, err := vmmfake.New(vmmfake.Options{ShmDir: shm})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Close)
	tpl := sandbox.Template{Name: "base", Kernel: filepath.Join(art, "vmlinuz"), Initrd: filepath.Join(art, "initrd"),
		BaseDisk: filepath.Join(art, "base.img")}
	for _, f := range []string{tpl.Kernel, tpl.Initrd, tpl.BaseDisk} {
		if err := os.WriteFile(f, []byte("artifact"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h := &harness{t: t, ctx: ctx, st: newFlakyStore(st), drv: drv, tpl: &fakeTemplates{tpl: tpl}}
	h.opts = Options{ID: "node-1", DataDir: filepath.Join(dir, "data"), Store: h.st, Driver: drv, Templates: h.tpl,
		ShmDir: shm, BootTimeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, e := range edit {
		e(&h.opts)
	}
	if d, ok := h.opts.Driver.(*vmmfake.Driver); ok {
		h.drv = d // an edit chose another fake
	}
	h.n = New(h.opts)
	t.Cleanup(func() { h.n.Close() })
	return h
}

// openStore opens a SQLite store in dir, closed when the test ends.
func openStore(t *testing.T, dir string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "zeish.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// restart replaces the node with a new one over the same store, driver and
// data dir (zeishd restarted; its VMs ran on) and recovers.
func (h *harness) restart() {
	h.t.Helper()
	h.n.Close()
	h.n = New(h.opts)
	h.t.Cleanup(func() { h.n.Close() })
	if err := h.n.Recover(h.ctx); err != nil {
		h.t.Fatal(err)
	}
}

// create makes a sandbox and waits until it settles in want.
func (h *harness) create(name string, want sandbox.State) *store.SandboxRecord {
	h.t.Helper()
	r, err := h.n.Create(h.ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{Name: name, AccountID: "acc",
		Template: "base", MemoryMiB: 64, DiskMiB: 128, VCPUs: 1}})
	if err != nil {
		h.t.Fatalf("create %s: %v", name, err)
	}
	return h.settle(r.ID, want)
}

// settle waits until sandbox id is in no transition and checks it is want.
func (h *harness) settle(id string, want sandbox.State) *store.SandboxRecord {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	r, err := h.n.Wait(ctx, id, "")
	if err != nil {
		h.t.Fatalf("wait %s: %v", id, err)
	}
	if want != "" && r.State != want {
		h.t.Fatalf("sandbox %s is %s (%s: %s), want %s", id, r.State, r.StateReason, r.ErrorMessage, want)
	}
	return r
}

func (h *harness) get(id string) *store.SandboxRecord {
	h.t.Helper()
	r, err := h.st.GetSandbox(h.ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// requireAgent checks the sandbox's guest agent answers through the node.
func (h *harness) requireAgent(id string) {
	h.t.Helper()
	c, err := h.n.Agent(h.ctx, h.get(id))
	if err != nil {
		h.t.Fatalf("agent of %s: %v", id, err)
	}
	if _, err := c.Info(h.ctx); err != nil {
		h.t.Fatalf("agent of %s: Info: %v", id, err)
	}
}

// requireConsistent checks what every record says against the driver: a
// running or paused sandbox has exactly one VM, alive, in the same state,
// on the disk its record names; no other VM runs (but a silent one, kept
// paused in error); every disk and layer a record needs exists.
func (h *harness) requireConsistent() {
	h.t.Helper()
	rows, err := h.st.ListSandboxes(h.ctx, store.SandboxFilter{})
	if err != nil {
		h.t.Fatal(err)
	}
	vms := map[string]vmmfake.VM{}
	for _, v := range h.drv.VMs() {
		if _, dup := vms[v.Handle.Spec.ID]; dup {
			h.t.Errorf("sandbox %s has two VMs", v.Handle.Spec.ID)
		}
		vms[v.Handle.Spec.ID] = v
	}
	for _, r := range rows {
		v, hasVM := vms[r.ID]
		delete(vms, r.ID)
		hd, _ := r.VMHandle()
		switch r.State {
		case sandbox.StateRunning, sandbox.StatePaused:
			want := vmm.RunStateRunning
			if r.State == sandbox.StatePaused {
				want = vmm.RunStatePaused
			}
			if !hasVM || hd == nil || hd.PID != v.Handle.PID || v.State != want {
				h.t.Errorf("%s is %s: VM %v (%s), handle %v", r.ID, r.State, hasVM, v.State, hd != nil)
				continue
			}
			if r.Disk != v.Handle.Disk {
				h.t.Errorf("%s: record disk %s, VM writes %s", r.ID, r.Disk, v.Handle.Disk)
			}
		case sandbox.StateError:
			// A VM kept (a silent guest, a destroy that failed) is the
			// one the record names, for the delete to stop.
			if hasVM && (hd == nil || hd.PID != v.Handle.PID) {
				h.t.Errorf("%s is error (%s) with a VM running that its record does not name", r.ID, r.ErrorCode)
			}
		default:
			if hasVM {
				h.t.Errorf("%s is %s with a VM running", r.ID, r.State)
			}
		}
		if r.State == sandbox.StateDestroyed || r.State == sandbox.StateError {
			continue
		}
		if r.State == sandbox.StateStopped && r.DiskBase != "" {
			if _, err := os.Stat(r.DiskBase); err != nil {
				h.t.Errorf("%s: disk base: %v", r.ID, err)
			}
		} else if _, err := os.Stat(r.Disk); err != nil {
			h.t.Errorf("%s (%s): disk: %v", r.ID, r.State, err)
		}
		for _, l := range r.Layers {
			if m, err := h.n.images.Read(l); err != nil || m.Disk == "" {
				h.t.Errorf("%s: layer %s: %v", r.ID, l, err)
			}
		}
		if r.ResumeImage != "" {
			if m, err := h.n.images.Read(r.ResumeImage); err != nil || m.VM == nil {
				h.t.Errorf("%s: resume image %s: %v", r.ID, r.ResumeImage, err)
			}
		}
	}
	for id := range vms {
		h.t.Errorf("a VM of %s runs that no record knows", id)
	}
}

// deleteAll deletes every sandbox and checks nothing is left: no VM, no RAM
// file, no sandbox folder, no image.
func (h *harness) deleteAll() {
	h.t.Helper()
	rows, err := h.st.ListSandboxes(h.ctx, store.SandboxFilter{})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, r := range rows {
		if _, err := h.n.Delete(h.ctx, r.ID); err != nil {
			h.t.Fatalf("delete %s: %v", r.ID, err)
		}
	}
	for _, r := range rows {
		h.settle(r.ID, sandbox.StateDestroyed)
	}
	h.requireNothingLeft()
}

func (h *harness) requireNothingLeft() {
	h.t.Helper()
	if vms := h.drv.VMs(); len(vms) > 0 {
		h.t.Errorf("%d VMs left running", len(vms))
	}
	for _, dir := range []string{h.opts.ShmDir, filepath.Join(h.opts.DataDir, "sandboxes"), h.n.images.Root()} {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if len(names) > 0 {
			h.t.Errorf("left in %s: %s", dir, strings.Join(names, ", "))
		}
	}
}

// vmOf returns the running VM of sandbox id.
func (h *harness) vmOf(id string) *vmm.Handle {
	h.t.Helper()
	hd, err := h.get(id).VMHandle()
	if err != nil || hd == nil {
		h.t.Fatalf("%s has no VM: %v", id, err)
	}
	return hd
}

// snapshot takes a snapshot of id.
func (h *harness) snapshot(id, name string) *store.SnapshotRecord {
	h.t.Helper()
	s, err := h.n.CreateSnapshot(h.ctx, id, name)
	if err != nil {
		h.t.Fatalf("snapshot %s: %v", id, err)
	}
	return s
}

// clone forks id into count children and waits for them to settle in want.
func (h *harness) clone(id string, count int, want sandbox.State) []*store.SandboxRecord {
	h.t.Helper()
	var kids []*store.SandboxRecord
	for range count {
		kids = append(kids, &store.SandboxRecord{})
	}
	_, kids, err := h.n.Clone(h.ctx, id, kids)
	if err != nil {
		h.t.Fatalf("clone %s: %v", id, err)
	}
	for _, k := range kids {
		h.settle(k.ID, want)
	}
	return kids
}

// isErr reports whether err is want (nil: no error).
func isErr(err, want error) bool {
	if want == nil {
		return err == nil
	}
	return errors.Is(err, want)
}
