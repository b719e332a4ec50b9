package qemu

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/vmm"
)

// cloneRig is what the live-capture tests capture: a clone of the real base
// template (its RAM an image's, mapped privately) with a process counting
// in it, and the checks made around every capture.
type cloneRig struct {
	t   *testing.T
	ctx context.Context
	d   *Driver
	vms *baseVMs
	img *vmm.Image    // the parent's image, the clone's RAM
	src *vmm.Handle   // the clone
	sc  *guest.Client // its agent
}

// newCloneRig boots a parent, starts the counter, captures the parent the
// cheap way (its own RAM) and starts a clone of that image.
func newCloneRig(ctx context.Context, t *testing.T, d *Driver) *cloneRig {
	r := &cloneRig{t: t, ctx: ctx, d: d, vms: newBaseVMs(ctx, t, d)}
	spec := r.newSpec()
	spec.BaseDisk = r.vms.tpl.BaseDisk
	parent := r.vms.start(spec)
	pc := r.vms.agent(parent)
	requireKernel(t, parent, spec.Kernel, spec.Initrd)
	r.run(pc, "echo 0 > /root/counter; sh -c 'i=0; while true; do i=$((i+1)); echo $i > /root/counter.new; mv /root/counter.new /root/counter; sleep 0.1; done' </dev/null >/dev/null 2>&1 &")
	r.requireCounting("parent", pc)
	pc.Close()
	imgDir := t.TempDir()
	img, _, err := d.Capture(ctx, parent, imgDir, false)
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	t.Cleanup(func() { os.Remove(img.MemFile) })
	r.img = img
	layer := filepath.Join(imgDir, "layer.qcow2")
	if err := os.Rename(parent.Disk, layer); err != nil {
		t.Fatal(err)
	}
	spec = r.newSpec()
	spec.BaseDisk, spec.From = layer, img
	r.src = r.vms.start(spec)
	r.sc = r.vms.agent(r.src)
	r.requireCounting("clone", r.sc)
	// It never boots a kernel: a stub stands in for it, and is gone once
	// QEMU has read it.
	requireKernel(t, r.src, filepath.Join(r.src.Spec.Dir, kernelStubName), "")
	if _, err := os.Stat(filepath.Join(r.src.Spec.Dir, kernelStubName)); !os.IsNotExist(err) {
		t.Errorf("the kernel stub is left after QEMU's start: %v", err)
	}
	return r
}

// requireKernel fails unless h's QEMU was given kernel and initrd ("" none).
func requireKernel(t *testing.T, h *vmm.Handle, kernel, initrd string) {
	t.Helper()
	args := procscan.Args(h.PID)
	for _, o := range []struct{ opt, want string }{{"-kernel", kernel}, {"-initrd", initrd}} {
		var want []string
		if o.want != "" {
			want = []string{o.want}
		}
		if got := optionValues(args, o.opt); !slices.Equal(got, want) {
			t.Errorf("QEMU's %s is %q, want %q", o.opt, got, want)
		}
	}
}

func (r *cloneRig) newSpec() vmm.Spec { return r.vms.spec("52:54:00:12:34:58") }

func (r *cloneRig) run(c *guest.Client, script string) string {
	r.t.Helper()
	var out bytes.Buffer
	res, err := c.Exec(r.ctx, guest.ExecRequest{Argv: []string{"sh", "-c", script}}, nil, &out, nil)
	if err != nil || res.ExitCode != 0 {
		r.t.Fatalf("exec %q: %v %+v %s", script, err, res, out.String())
	}
	return strings.TrimSpace(out.String())
}

func (r *cloneRig) counter(c *guest.Client) int {
	n, _ := strconv.Atoi(r.run(c, "cat /root/counter"))
	return n
}

// requireCounting fails unless c's counter moves; it returns its value.
func (r *cloneRig) requireCounting(what string, c *guest.Client) int {
	r.t.Helper()
	a := r.counter(c)
	time.Sleep(700 * time.Millisecond)
	b := r.counter(c)
	if b <= a {
		r.t.Fatalf("%s: counter stuck at %d", what, a)
	}
	return b
}

// captureLive captures h (agent c) live and starts a child of the image,
// checking: the source never stops counting, keeps its agent and writes
// the new overlay, backed by the frozen one; no receiver folder is left;
// the child starts where the source was at the switch-over, with the
// files and RAM written before it and none written after. after, if set,
// checks the image more.
func (r *cloneRig) captureLive(what string, h *vmm.Handle, c *guest.Client, after func(img *vmm.Image)) (*vmm.Handle, *guest.Client) {
	t, d, ctx := r.t, r.d, r.ctx
	t.Helper()
	// Memory and disk written just before: the child must see both.
	mark := randomHex(8)
	r.run(c, "echo "+mark+" > /root/mark; head -c 8000000 /dev/urandom > /dev/shm/blob; md5sum /dev/shm/blob | cut -d' ' -f1 > /root/blob.md5; sync")
	dir := t.TempDir()
	swap := vmm.DiskSwap{Frozen: filepath.Join(dir, "layer.qcow2"), Next: filepath.Join(filepath.Dir(h.Disk), "next-"+randomHex(3)+".qcow2")}
	oldDisk := h.Disk
	before := r.counter(c)
	img, pause, err := d.CaptureLive(ctx, h, dir, swap)
	if err != nil {
		t.Fatalf("%s: CaptureLive: %v", what, err)
	}
	t.Cleanup(func() { os.Remove(img.MemFile) })
	t.Logf("%s: captured live, source paused %v", what, pause)
	if pause <= 0 || h.Disk != swap.Next || !d.Alive(h) {
		t.Fatalf("%s: pause %v, disk %s (want %s), alive %v", what, pause, h.Disk, swap.Next, d.Alive(h))
	}
	if _, err := os.Stat(filepath.Join(dir, receiverDirName)); !os.IsNotExist(err) {
		t.Errorf("%s: the receiver's folder is left: %v", what, err)
	}
	if _, err := os.Stat(oldDisk); err != nil {
		t.Errorf("%s: the old overlay's name must stay until its owner removes it: %v", what, err)
	}
	if after != nil {
		after(img)
	}
	// The source carries on, on the same agent connection, and what it
	// writes now is its own.
	if now := r.requireCounting(what+": source after capture", c); now <= before {
		t.Fatalf("%s: source counter went from %d to %d", what, before, now)
	}
	r.run(c, "echo after > /root/mark; echo x > /dev/shm/blob")
	spec := r.newSpec()
	spec.BaseDisk, spec.From = swap.Frozen, img
	child := r.vms.start(spec)
	cc := r.vms.agent(child)
	if err := cc.Configure(ctx, guest.Config{Hostname: "child", Time: time.Now(), Entropy: make([]byte, 64),
		Network: &guest.Network{Interface: "eth0", MAC: "52:54:00:aa:bb:" + randomHex(1), Address: "10.88.1.3/16"}}); err != nil {
		t.Fatalf("%s: configure child: %v", what, err)
	}
	if got := r.run(cc, "cat /root/mark"); got != mark {
		t.Errorf("%s: child's /root/mark = %q, want %q (the disk at the switch-over)", what, got, mark)
	}
	if got, want := r.run(cc, "md5sum /dev/shm/blob | cut -d' ' -f1"), r.run(cc, "cat /root/blob.md5"); got != want {
		t.Errorf("%s: child's RAM blob md5 %s, want %s (memory at the switch-over)", what, got, want)
	}
	if n := r.requireCounting(what+": child", cc); n < before {
		t.Errorf("%s: child counts from %d, below %d seen before the capture", what, n, before)
	}
	if got := r.run(c, "cat /root/mark"); got != "after" {
		t.Errorf("%s: source's /root/mark = %q after the child started", what, got)
	}
	return child, cc
}

// failCapture captures the clone with a disk swap that cannot be made (the
// frozen layer's folder is missing) and checks that it fails with the
// clone on its disk, no receiver running, and none of the capture's files
// left: the image's RAM file, the receiver's folder, the next overlay, and
// more.
func (r *cloneRig) failCapture(more ...func(bad string) string) {
	t, d := r.t, r.d
	t.Helper()
	bad := t.TempDir()
	disk := r.src.Disk
	badSwap := vmm.DiskSwap{Frozen: filepath.Join(bad, "missing", "layer.qcow2"), Next: filepath.Join(filepath.Dir(r.src.Disk), "next-"+randomHex(3)+".qcow2")}
	if _, _, err := d.CaptureLive(r.ctx, r.src, bad, badSwap); err == nil {
		t.Fatal("CaptureLive with a disk swap that cannot be made: no error")
	}
	if r.src.Disk != disk {
		t.Errorf("after a failed capture the source writes %s, want %s", r.src.Disk, disk)
	}
	if pids := findTagged(idOf(receiverHandle(r.src, bad))); len(pids) > 0 {
		t.Errorf("after a failed capture its receiver still runs: pids %v", pids)
	}
	left := []string{d.imageMemFile(bad), filepath.Join(bad, receiverDirName), badSwap.Next}
	for _, f := range more {
		left = append(left, f(bad))
	}
	for _, p := range left {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after a failed capture %s is left (%v)", p, err)
		}
	}
	r.requireCounting("clone after a failed capture", r.sc)
}
