package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm/vmmfake"
)

// A warm build leaves one image and no VM; a create of the warm size starts
// from it (a fork child of the template's machine), another size boots
// cold; the image goes with the template once no sandbox needs it.
func TestWarm(t *testing.T) {
	h := newHarness(t)
	tpl := h.tpl.tpl
	tpl.ID, tpl.Name, tpl.AccountID, tpl.State = "tpl_warm", "warm", "acc", sandbox.TemplateReady
	tpl.ReadyCmd = []string{"true"}
	var steps []string
	w, unpin, err := h.n.Warm(h.ctx, tpl, func(s string) { steps = append(steps, s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(h.drv.VMs()) != 0 {
		t.Errorf("the warm build's VM still runs")
	}
	if _, err := os.Stat(filepath.Join(h.opts.DataDir, "warm", tpl.ID)); !os.IsNotExist(err) {
		t.Errorf("warm build folder left: %v", err)
	}
	if !slices.ContainsFunc(steps, func(s string) bool { return strings.Contains(s, "waiting for") }) {
		t.Errorf("progress: %q", steps)
	}
	tpl.Warm = w
	if err := h.st.PutTemplate(h.ctx, tpl); err != nil {
		t.Fatal(err)
	}
	unpin()
	h.n.CollectImages(h.ctx)
	if _, err := h.n.images.Read(w.Image); err != nil {
		t.Fatalf("the template's image was collected: %v", err)
	}
	h.tpl.tpl = tpl

	create := func(memMiB, diskMiB int) *store.SandboxRecord {
		r, err := h.n.Create(h.ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{AccountID: "acc", Template: tpl.ID,
			VCPUs: w.VCPUs, MemoryMiB: memMiB, DiskMiB: diskMiB}})
		if err != nil {
			t.Fatal(err)
		}
		return h.settle(r.ID, sandbox.StateRunning)
	}
	warm := create(w.MemoryMiB, w.DiskMiB)
	if vm := h.vmOf(warm.ID); vm.Spec.From == nil || filepath.Base(vm.Spec.From.Dir) != w.Image || !slices.Contains(warm.Layers, w.Image) {
		t.Errorf("a create of the warm size did not start from the image: from %+v, layers %v", vm.Spec.From, warm.Layers)
	}
	h.requireAgent(warm.ID)
	cold := create(64, w.DiskMiB)
	if vm := h.vmOf(cold.ID); vm.Spec.From != nil || len(cold.Layers) != 0 {
		t.Errorf("a create of another size started from an image: %+v", vm.Spec.From)
	}

	tpl.State = sandbox.TemplateDeleted
	if err := h.st.PutTemplate(h.ctx, tpl); err != nil {
		t.Fatal(err)
	}
	h.n.CollectImages(h.ctx)
	if _, err := h.n.images.Read(w.Image); err != nil {
		t.Fatalf("image collected while a sandbox runs from it: %v", err)
	}
	h.deleteAll() // gc after the last delete takes the image too
}

// A failed warm build (the ready command never succeeds, the capture fails)
// leaves no VM, image or folder.
func TestWarmFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ready []string
		fail  vmmfake.Op
		want  string
	}{
		{"never ready", []string{"false"}, "", "ready command"},
		{"capture fails", []string{"true"}, vmmfake.OpCapture, "capture"},
		{"boot fails", nil, vmmfake.OpStart, "boot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			tpl := h.tpl.tpl
			tpl.ID, tpl.ReadyCmd, tpl.ReadyTimeoutSeconds = "tpl_bad", tc.ready, 1
			if tc.fail != "" {
				h.drv.FailNth(tc.fail, 1)
			}
			_, _, err := h.n.Warm(context.Background(), tpl, func(string) {})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("warm: %v, want an error about %q", err, tc.want)
			}
			h.n.CollectImages(h.ctx)
			h.requireNothingLeft()
			if _, err := os.Stat(filepath.Join(h.opts.DataDir, "warm", tpl.ID)); !os.IsNotExist(err) {
				t.Errorf("warm build folder left: %v", err)
			}
		})
	}
}
