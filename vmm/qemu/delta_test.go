package qemu

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/vmm"
)

// TestCaptureByPrivatePages runs the real base template with a process
// writing all the time in a clone (its RAM an image's, mapped privately)
// and captures it live the way delta.go does: its private pages over a
// copy of its image, device state without RAM. At every step the source
// never stops counting and keeps its agent; each child starts where the
// source was at the pause, with the files and RAM written before and none
// after; a child of a delta image is captured the same way again. A clone
// holding more private RAM than the limit is migrated instead, and a
// delta capture that fails leaves nothing and the source running.
func TestCaptureByPrivatePages(t *testing.T) {
	d := newTestDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	vms := newBaseVMs(ctx, t, d)
	newSpec := func() vmm.Spec { return vms.spec("52:54:00:12:34:58") }
	start := vms.start
	agent := vms.agent
	run := func(c *guest.Client, script string) string {
		t.Helper()
		var out bytes.Buffer
		res, err := c.Exec(ctx, guest.ExecRequest{Argv: []string{"sh", "-c", script}}, nil, &out, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q: %v %+v %s", script, err, res, out.String())
		}
		return strings.TrimSpace(out.String())
	}
	counter := func(c *guest.Client) int {
		n, _ := strconv.Atoi(run(c, "cat /root/counter"))
		return n
	}
	requireCounting := func(what string, c *guest.Client) int {
		t.Helper()
		a := counter(c)
		time.Sleep(700 * time.Millisecond)
		b := counter(c)
		if b <= a {
			t.Fatalf("%s: counter stuck at %d", what, a)
		}
		return b
	}

	// A parent, captured the cheap way, and a clone of it: the source.
	spec := newSpec()
	spec.BaseDisk = vms.tpl.BaseDisk
	parent := start(spec)
	pc := agent(parent)
	run(pc, "echo 0 > /root/counter; sh -c 'i=0; while true; do i=$((i+1)); echo $i > /root/counter.new; mv /root/counter.new /root/counter; sleep 0.1; done' </dev/null >/dev/null 2>&1 &")
	requireCounting("parent", pc)
	pc.Close()
	imgDir := t.TempDir()
	img, _, err := d.Capture(ctx, parent, imgDir, false)
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	t.Cleanup(func() { os.Remove(img.MemFile) })
	layer := filepath.Join(imgDir, "layer.qcow2")
	if err := os.Rename(parent.Disk, layer); err != nil {
		t.Fatal(err)
	}
	spec = newSpec()
	spec.BaseDisk, spec.From = layer, img
	src := start(spec)
	sc := agent(src)
	requireCounting("clone", sc)

	// captureLive captures h live and starts a child of the image.
	var deltas int64
	captureLive := func(what string, h *vmm.Handle, c *guest.Client, wantDelta bool) (*vmm.Handle, *guest.Client) {
		t.Helper()
		// Memory and disk written just before: the child must see both.
		mark := randomHex(8)
		run(c, "echo "+mark+" > /root/mark; head -c 8000000 /dev/urandom > /dev/shm/blob; md5sum /dev/shm/blob | cut -d' ' -f1 > /root/blob.md5; sync")
		dir := t.TempDir()
		swap := vmm.DiskSwap{Frozen: filepath.Join(dir, "layer.qcow2"), Next: filepath.Join(filepath.Dir(h.Disk), "next-"+randomHex(3)+".qcow2")}
		oldDisk := h.Disk
		before := counter(c)
		img, pause, err := d.CaptureLive(ctx, h, dir, swap)
		if err != nil {
			t.Fatalf("%s: CaptureLive: %v", what, err)
		}
		t.Cleanup(func() { os.Remove(img.MemFile) })
		t.Logf("%s: captured (by private pages: %v), source paused %v", what, wantDelta, pause)
		if wantDelta {
			deltas++
		}
		if n := d.deltaCaptures.Load(); n != deltas {
			t.Fatalf("%s: %d captures by private pages, want %d", what, n, deltas)
		}
		for _, p := range []string{partMemFile(img.MemFile), filepath.Join(h.Spec.Dir, deltaStateName)} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("%s: %s is left (%v)", what, p, err)
			}
		}
		if pause <= 0 || h.Disk != swap.Next || !d.Alive(h) {
			t.Fatalf("%s: pause %v, disk %s (want %s), alive %v", what, pause, h.Disk, swap.Next, d.Alive(h))
		}
		if _, err := os.Stat(filepath.Join(dir, receiverDirName)); !os.IsNotExist(err) {
			t.Errorf("%s: the receiver's folder is left: %v", what, err)
		}
		if _, err := os.Stat(oldDisk); err != nil {
			t.Errorf("%s: the old overlay's name must stay until its owner removes it: %v", what, err)
		}
		// The source carries on, on the same agent connection, and what it
		// writes now is its own.
		after := requireCounting(what+": source after capture", c)
		if after <= before {
			t.Fatalf("%s: source counter went from %d to %d", what, before, after)
		}
		run(c, "echo after > /root/mark; echo x > /dev/shm/blob")
		spec := newSpec()
		spec.BaseDisk, spec.From = swap.Frozen, img
		child := start(spec)
		cc := agent(child)
		if err := cc.Configure(ctx, guest.Config{Hostname: "child", Time: time.Now(), Entropy: make([]byte, 64),
			Network: &guest.Network{Interface: "eth0", MAC: "52:54:00:aa:bb:" + randomHex(1), Address: "10.88.1.3/16"}}); err != nil {
			t.Fatalf("%s: configure child: %v", what, err)
		}
		if got := run(cc, "cat /root/mark"); got != mark {
			t.Errorf("%s: child's /root/mark = %q, want %q (the disk at the switch-over)", what, got, mark)
		}
		if got, want := run(cc, "md5sum /dev/shm/blob | cut -d' ' -f1"), run(cc, "cat /root/blob.md5"); got != want {
			t.Errorf("%s: child's RAM blob md5 %s, want %s (memory at the switch-over)", what, got, want)
		}
		if n := requireCounting(what+": child", cc); n < before {
			t.Errorf("%s: child counts from %d, below %d seen before the capture", what, n, before)
		}
		if got := run(c, "cat /root/mark"); got != "after" {
			t.Errorf("%s: source's /root/mark = %q after the child started", what, got)
		}
		return child, cc
	}
	// A delta capture that fails (the frozen layer's folder is missing)
	// leaves no part-made image or state, and the source runs on, on its
	// disk.
	bad := t.TempDir()
	disk := src.Disk
	badSwap := vmm.DiskSwap{Frozen: filepath.Join(bad, "missing", "layer.qcow2"), Next: filepath.Join(filepath.Dir(src.Disk), "next-"+randomHex(3)+".qcow2")}
	if _, _, err := d.CaptureLive(ctx, src, bad, badSwap); err == nil {
		t.Fatal("CaptureLive with a disk swap that cannot be made: no error")
	}
	if src.Disk != disk {
		t.Errorf("after a failed capture the source writes %s, want %s", src.Disk, disk)
	}
	for _, p := range []string{d.imageMemFile(bad), partMemFile(d.imageMemFile(bad)), filepath.Join(src.Spec.Dir, deltaStateName), badSwap.Next} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after a failed capture %s is left (%v)", p, err)
		}
	}
	requireCounting("clone after a failed capture", sc)

	child, cc := captureLive("clone", src, sc, true)
	_, _ = captureLive("clone again", src, sc, true)
	grandchild, gc := captureLive("child of the clone", child, cc, true)
	// Over the limit (each capture writes 8 MB of RAM first): a migration,
	// from a VM started from a delta image.
	d.deltaMaxMiB = 4
	captureLive("child of a delta image, over the limit", grandchild, gc, false)

	// zeishd killed inside the pause of a delta capture: the guest is
	// stopped, the part-made image and the device state are on disk.
	// SettleCapture, as a restarted node calls it, lets the guest run on
	// and removes both.
	cut := t.TempDir()
	cutSwap := vmm.DiskSwap{Frozen: filepath.Join(cut, "layer.qcow2"), Next: filepath.Join(filepath.Dir(src.Disk), "next-"+randomHex(3)+".qcow2")}
	leftovers := []string{partMemFile(d.imageMemFile(cut)), filepath.Join(src.Spec.Dir, deltaStateName)}
	for _, p := range leftovers {
		if err := os.WriteFile(p, []byte("cut short"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.withMonitor(ctx, src.QMPSocket, func(m *monitor) error { return m.execute(ctx, "stop", nil, nil) }); err != nil {
		t.Fatal(err)
	}
	if err := d.SettleCapture(ctx, src, cut, cutSwap, true); err != nil {
		t.Fatalf("SettleCapture: %v", err)
	}
	for _, p := range leftovers {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after SettleCapture %s is left (%v)", p, err)
		}
	}
	requireCounting("clone after a capture cut short", sc)
}
