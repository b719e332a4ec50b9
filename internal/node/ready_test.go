package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/node/ready"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm/vmmfake"
)

// Ready VMs: a warm build makes one; a create of the warm size adopts it
// (and its agent connection) and another is made; another size does not
// take it; an adopted sandbox survives a restart (the sweep knows its VM by
// the placeholder it was launched for); a restart or a deleted template
// ends the ready VMs and leaves nothing.
func TestReadyVMs(t *testing.T) {
	h, tpl := readyHarness(t)
	w := tpl.Warm
	waitReady := func(want int) { t.Helper(); h.waitReady(want) }
	waitReady(1)
	if vms := h.drv.VMs(); len(vms) != 1 || vms[0].Configs != 1 {
		t.Fatalf("the ready VM: %+v (want one, configured once)", vms)
	}

	create := func(memMiB int) *store.SandboxRecord {
		r, err := h.n.Create(h.ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{AccountID: "acc", Template: tpl.ID,
			VCPUs: w.VCPUs, MemoryMiB: memMiB, DiskMiB: w.DiskMiB}})
		if err != nil {
			t.Fatal(err)
		}
		return h.settle(r.ID, sandbox.StateRunning)
	}
	warm := create(w.MemoryMiB)
	vm := h.vmOf(warm.ID)
	if vm.Origin == nil || vm.Spec.ID != warm.ID || vm.Spec.Dir != filepath.Join(h.n.sandboxDir(warm.ID), "vm-1") || vm.Disk != h.n.diskPath(warm.ID, 1) {
		t.Fatalf("the warm create did not adopt the ready VM as its own: %+v", vm)
	}
	if _, err := os.Stat(h.n.sandboxDir(vm.Origin.ID)); !os.IsNotExist(err) {
		t.Errorf("the placeholder's folder is left: %v", err)
	}
	if _, hits, misses := h.n.ready.Count(); hits != 1 || misses != 0 {
		t.Errorf("hits %d, misses %d; want 1, 0", hits, misses)
	}
	h.requireAgent(warm.ID)
	for _, v := range h.drv.VMs() {
		if v.Handle.Spec.ID == warm.ID && (v.Configs != 2 || v.Hostname != warm.Hostname) {
			t.Errorf("the adopted VM was configured %d times, hostname %q: want its placeholder's and the sandbox's (%q)", v.Configs, v.Hostname, warm.Hostname)
		}
	}
	waitReady(1) // made again once the create ran

	other := create(w.MemoryMiB / 2)
	if h.vmOf(other.ID).Origin != nil {
		t.Error("a create of another size took the warm-size ready VM")
	}
	if _, _, misses := h.n.ready.Count(); misses != 0 {
		t.Errorf("a cold boot counted as a miss: %d", misses)
	}

	// A restart ends the ready VMs (they are no sandbox's) and keeps the
	// adopted one's: its VMM still names the placeholder.
	h.restart()
	h.settle(warm.ID, sandbox.StateRunning)
	h.requireAgent(warm.ID)
	if got := h.vmOf(warm.ID); h.drv.VMs() == nil || !h.drv.Alive(got) {
		t.Fatal("the adopted sandbox's VM was swept at the restart")
	}
	h.n.ready.Note(ready.Kind{Template: tpl.ID}) // as a create after the restart would
	h.n.ready.Wake()
	waitReady(1)

	// A deleted template takes its ready VMs along at once.
	h.deleteTemplate(tpl)
	if got := len(h.drv.VMs()); got != 2 {
		t.Errorf("%d VMs run, want the 2 sandboxes'", got)
	}
	h.deleteAll()
}

// A create that took a ready VM and then fails (no memory left) destroys
// it and leaves nothing; the next create still finds one.
func TestReadyVMCreateFails(t *testing.T) {
	h, tpl := readyHarness(t)
	w := tpl.Warm
	h.waitReady(1)
	readyID := h.drv.VMs()[0].Handle.Spec.ID
	h.st.failNth("CreateSandboxes", 1)
	if _, err := h.n.Create(h.ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{AccountID: "acc", Template: tpl.ID,
		VCPUs: w.VCPUs, MemoryMiB: w.MemoryMiB, DiskMiB: w.DiskMiB}}); err == nil {
		t.Fatal("create succeeded with the store failing")
	}
	// (The pool may have made another meanwhile; the one taken is gone.)
	for _, v := range h.drv.VMs() {
		if v.Handle.Spec.ID == readyID {
			t.Errorf("the ready VM the failed create took still runs")
		}
	}
	if _, err := os.Stat(h.n.sandboxDir(readyID)); !os.IsNotExist(err) {
		t.Errorf("its folder is left: %v", err)
	}
	if rows, _ := h.st.ListSandboxes(h.ctx, store.SandboxFilter{}); len(rows) != 0 {
		t.Errorf("%d sandbox rows after a failed create", len(rows))
	}
}

// waitReady waits until the node keeps want ready VMs.
func (h *harness) waitReady(want int) {
	h.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, _, _ := h.n.ready.Count(); n == want {
			return
		} else if time.Now().After(deadline) {
			h.t.Fatalf("%d ready VMs, want %d", n, want)
		}
	}
}

// readyHarness is a node keeping one ready VM per warm template, and a
// warm template it has built and recorded (so the pool may use it).
func readyHarness(t *testing.T) (*harness, sandbox.Template) {
	t.Helper()
	h := newHarness(t, func(o *Options) { o.ReadyVMs, o.ReadyWarmup = 1, [][]string{{"true"}} })
	if err := h.n.Recover(h.ctx); err != nil {
		t.Fatal(err)
	}
	tpl := h.tpl.tpl
	tpl.ID, tpl.Name, tpl.AccountID, tpl.State = "tpl_ready", "ready", "acc", sandbox.TemplateReady
	w, unpin, err := h.n.Warm(h.ctx, tpl, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	tpl.Warm = w
	if err := h.st.PutTemplate(h.ctx, tpl); err != nil {
		t.Fatal(err)
	}
	h.tpl.set(tpl)
	unpin()
	return h, tpl
}

// Card-less ready VMs: the first `network: {enabled: false}` create of a
// warm template boots cold (the warm image has a card, and an image loads
// only into a machine like its own); the pool then builds the template's
// card-less image and keeps a VM without a card ready from it, which the
// next such create takes, while a create with a network still takes the
// one with a card. Each kind is kept only while used; the card-less image
// outlives a restart, and goes with its template.
func TestReadyVMsCardless(t *testing.T) {
	h, tpl := readyHarness(t)
	w := tpl.Warm
	h.waitReady(1)
	create := func(enabled bool) *store.SandboxRecord {
		t.Helper()
		r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{AccountID: "acc", Template: tpl.ID,
			VCPUs: w.VCPUs, MemoryMiB: w.MemoryMiB, DiskMiB: w.DiskMiB}}
		if !enabled {
			r.Network = &sandbox.Network{Enabled: false}
		}
		r, err := h.n.Create(h.ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return h.settle(r.ID, sandbox.StateRunning)
	}
	cardless := ready.Kind{Template: tpl.ID, Cardless: true}
	readyOf := func(k ready.Kind) []*ready.VM { return h.n.ready.VMs(k) }

	first := create(false)
	if vm := h.vmOf(first.ID); vm.Origin != nil || vm.Spec.From != nil || !vm.Spec.NoNIC {
		t.Fatalf("the first card-less create: %+v; want a cold boot without a card", vm.Spec)
	}
	h.waitReady(2)
	twin := h.n.images.Twin(w.Image)
	if twin == "" || twin == w.Image {
		t.Fatalf("card-less image %q beside warm image %s", twin, w.Image)
	}
	vms := readyOf(cardless)
	if len(vms) != 1 || !vms[0].Handle.Spec.NoNIC || vms[0].Image != twin || filepath.Base(vms[0].Handle.Spec.From.Dir) != twin {
		t.Fatalf("card-less ready VMs: %+v", vms)
	}

	hit := create(false)
	vm := h.vmOf(hit.ID)
	if vm.Origin == nil || vm.Origin.ID != vms[0].Handle.Spec.ID || !vm.Spec.NoNIC || filepath.Base(vm.Spec.From.Dir) != twin {
		t.Fatalf("the second card-less create did not adopt the card-less ready VM: %+v", vm)
	}
	h.requireAgent(hit.ID)
	withCard := create(true)
	if vm := h.vmOf(withCard.ID); vm.Origin == nil || vm.Spec.NoNIC || filepath.Base(vm.Spec.From.Dir) != w.Image {
		t.Fatalf("a create with a network did not adopt the ready VM with a card: %+v", vm)
	}
	if _, hits, misses := h.n.ready.Count(); hits != 2 || misses != 0 {
		t.Errorf("hits %d, misses %d; want 2, 0", hits, misses)
	}
	h.waitReady(2) // both kinds made again

	// After a restart the card-less image is still there: the kind's VMs
	// come from it without another build.
	h.restart()
	h.n.ready.Note(cardless)
	h.n.ready.Wake()
	h.waitReady(1)
	h.n.ready.Note(ready.Kind{Template: tpl.ID})
	h.n.ready.Wake()
	h.waitReady(2)
	if vms := readyOf(cardless); len(vms) != 1 || vms[0].Image != twin || h.n.images.Twin(w.Image) != twin {
		t.Fatalf("after a restart: card-less VMs %+v, image %q; want from %s", vms, h.n.images.Twin(w.Image), twin)
	}

	// A deleted template takes both kinds' VMs along, and, once its
	// sandboxes are gone, both its images (deleteAll checks).
	h.deleteTemplate(tpl)
	h.deleteAll()
}

// A card-less build that fails (a template whose start or ready command
// needs the network, say) is not tried again for the same warm image:
// each try is a whole warm build. Card-less creates boot cold meanwhile,
// and the failed build leaves nothing.
func TestReadyVMsCardlessBuildFails(t *testing.T) {
	h, tpl := readyHarness(t)
	w := tpl.Warm
	h.waitReady(1)
	var tries atomic.Int32
	h.drv.SetHook(func(op vmmfake.Op, id string) error {
		if op == vmmfake.OpStart && strings.HasSuffix(id, cardlessSuffix) {
			tries.Add(1)
			return errors.New("the start command wants the network")
		}
		return nil
	})
	cardless := ready.Kind{Template: tpl.ID, Cardless: true}
	create := func() *store.SandboxRecord {
		t.Helper()
		r, err := h.n.Create(h.ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{AccountID: "acc", Template: tpl.ID,
			VCPUs: w.VCPUs, MemoryMiB: w.MemoryMiB, DiskMiB: w.DiskMiB, Network: &sandbox.Network{Enabled: false}}})
		if err != nil {
			t.Fatal(err)
		}
		r = h.settle(r.ID, sandbox.StateRunning)
		if vm := h.vmOf(r.ID); vm.Spec.From != nil || !vm.Spec.NoNIC {
			t.Fatalf("a card-less create without a card-less image: %+v; want a cold boot without a card", vm.Spec)
		}
		return r
	}
	create()
	for deadline := time.Now().Add(10 * time.Second); tries.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pool never tried to build the card-less image")
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if h.n.cardless.failedFor(w.Image) != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed build is not remembered")
		}
	}
	// The retry pause over: the pool still does not build it again.
	h.n.ready.Retry(cardless)
	create()
	h.n.ready.Wake()
	h.waitReady(1)
	time.Sleep(100 * time.Millisecond) // a round that would try again
	if got := tries.Load(); got != 1 {
		t.Errorf("%d card-less builds tried, want 1", got)
	}
	if id := h.n.images.Twin(w.Image); id != "" {
		t.Errorf("a card-less image %s is named", id)
	}
	if _, err := os.Stat(filepath.Join(h.opts.DataDir, "warm", tpl.ID+cardlessSuffix)); !os.IsNotExist(err) {
		t.Errorf("the failed build's folder is left: %v", err)
	}
	h.drv.SetHook(nil)
	tpl.State = sandbox.TemplateDeleted
	if err := h.st.PutTemplate(h.ctx, tpl); err != nil {
		t.Fatal(err)
	}
	h.tpl.set(tpl)
	h.n.CollectImages(h.ctx)
	h.deleteAll()
}

// deleteTemplate marks tpl deleted and collects images: no ready VM of it
// may be left.
func (h *harness) deleteTemplate(tpl sandbox.Template) {
	h.t.Helper()
	tpl.State = sandbox.TemplateDeleted
	if err := h.st.PutTemplate(h.ctx, tpl); err != nil {
		h.t.Fatal(err)
	}
	h.tpl.set(tpl)
	h.n.CollectImages(h.ctx)
	if n, _, _ := h.n.ready.Count(); n != 0 {
		h.t.Errorf("%d ready VMs of a deleted template", n)
	}
}
