package qemu

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeish/zeish/vmm"
)

func TestScratchImageMiB(t *testing.T) {
	d := newTestDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	vms := newBaseVMs(ctx, t, d)
	for _, extra := range []string{"", " init_on_free=1"} {
		spec := vms.spec("52:54:00:12:34:58")
		spec.KernelArgs += extra
		spec.BaseDisk = vms.tpl.BaseDisk
		parent := vms.start(spec)
		vms.agent(parent).Close()
		imgDir := t.TempDir()
		img, _, err := d.Capture(ctx, parent, imgDir, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(img.MemFile) })
		layer := filepath.Join(imgDir, "layer.qcow2")
		os.Rename(parent.Disk, layer)
		spec = vms.spec("52:54:00:12:34:59")
		spec.KernelArgs += extra
		spec.BaseDisk, spec.From = layer, img
		src := vms.start(spec)
		vms.agent(src)
		d.background.Wait()
		t.Logf("%q: parent's image after sparsify %d MiB", extra, allocatedMiB(img.MemFile))
		for i := 0; i < 2; i++ {
			dir := t.TempDir()
			swap := vmm.DiskSwap{Frozen: filepath.Join(dir, "layer.qcow2"), Next: filepath.Join(filepath.Dir(src.Disk), "next-"+randomHex(3)+".qcow2")}
			im, _, err := d.CaptureLive(ctx, src, dir, swap)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%q: live image %d MiB", extra, allocatedMiB(im.MemFile))
			os.Remove(im.MemFile)
		}
	}
}
