package qemu

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/vmm"
)

// TestBusyGuestSurvivesForkAndPromotion runs the real base template and
// agent with a process writing all the time, and checks that the guest stays
// healthy through every move fork makes: capture, a clone of the image,
// promotion of that clone, capture of the promoted VM and a clone of that.
func TestBusyGuestSurvivesForkAndPromotion(t *testing.T) {
	d := newTestDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	vms := newBaseVMs(ctx, t, d)
	newSpec := func() vmm.Spec { return vms.spec("52:54:00:12:34:57") }
	agent := vms.agent
	counter := func(c *guest.Client) int {
		var out bytes.Buffer
		res, err := c.Exec(ctx, guest.ExecRequest{Argv: []string{"cat", "/root/counter"}}, nil, &out, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("read counter: %v %+v", err, res)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(out.String()))
		return n
	}
	requireCounting := func(what string, c *guest.Client) {
		a := counter(c)
		time.Sleep(time.Second)
		if b := counter(c); b <= a {
			t.Fatalf("%s: counter stuck at %d", what, a)
		}
	}
	start := vms.start
	capture := func(h *vmm.Handle) (*vmm.Image, string) {
		dir := t.TempDir()
		img, _, err := d.Capture(ctx, h, dir, false)
		if err != nil {
			t.Fatalf("Capture: %v", err)
		}
		t.Cleanup(func() { os.Remove(img.MemFile) })
		layer := filepath.Join(dir, "layer.qcow2")
		if err := os.Rename(h.Disk, layer); err != nil {
			t.Fatal(err)
		}
		return img, layer
	}

	spec := newSpec()
	spec.BaseDisk = vms.tpl.BaseDisk
	parent := start(spec)
	pc := agent(parent)
	script := "echo 0 > /root/counter; sh -c 'i=0; while true; do i=$((i+1)); echo $i > /root/counter.new; mv /root/counter.new /root/counter; sleep 0.1; done' </dev/null >/dev/null 2>&1 &"
	if res, err := pc.Exec(ctx, guest.ExecRequest{Argv: []string{"sh", "-c", script}}, nil, nil, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("start counter: %v %+v", err, res)
	}
	requireCounting("parent", pc)
	pc.Close()

	img, layer := capture(parent)
	spec = newSpec()
	spec.BaseDisk, spec.From = layer, img
	clone := start(spec)
	cc := agent(clone)
	// As zeishd does after every fork: a new identity, which also takes the
	// NIC down and up with a new MAC.
	if err := cc.Configure(ctx, guest.Config{Hostname: "clone", Time: time.Now(), Entropy: make([]byte, 64),
		Network: &guest.Network{Interface: "eth0", MAC: "52:54:00:aa:bb:cc", Address: "10.88.1.2/16"}}); err != nil {
		t.Fatalf("configure clone: %v", err)
	}
	requireCounting("clone", cc)
	time.Sleep(time.Second) // let it write: its RAM now differs from the image
	cc.Close()              // as zeishd does before a promotion

	promoted, downtime, err := d.Promote(ctx, clone, newSpec().Dir)
	if err != nil {
		t.Fatalf("Promote: %v", err)
	}
	t.Cleanup(func() { d.Destroy(context.Background(), promoted) })
	t.Logf("promoted, guest paused %v", downtime)
	// Captured at once, as a fork of a clone does: its continuation is
	// launched first, on the promoted VM's disk and RAM file.
	img2Dir := t.TempDir()
	layer2 := filepath.Join(img2Dir, "layer.qcow2")
	if err := os.Link(promoted.Disk, layer2); err != nil {
		t.Fatal(err)
	}
	contSpec := newSpec()
	contSpec.BaseDisk, contSpec.Deferred = layer2, true
	contSpec.From = &vmm.Image{Dir: img2Dir, MemFile: promoted.MemFile, MemoryMiB: 256}
	cont := start(contSpec)
	img2, _, err := d.Capture(ctx, promoted, img2Dir, false)
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	t.Cleanup(func() { os.Remove(img2.MemFile) })
	os.Remove(promoted.Disk)
	if err := d.Load(ctx, cont, img2, true); err != nil {
		t.Fatalf("Load: %v", err)
	}
	requireCounting("continuation of the promoted VM", agent(cont))
	spec = newSpec()
	spec.BaseDisk, spec.From = layer2, img2
	grand := start(spec)
	requireCounting("clone of the promoted VM", agent(grand))

	// The promotion read, and so allocated, every page of both RAM files;
	// once they are images their zero pages are punched out again.
	d.background.Wait()
	for _, f := range []string{img.MemFile, img2.MemFile} {
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err != nil {
			t.Fatal(err)
		}
		if mib := st.Blocks * 512 >> 20; mib >= 256*9/10 {
			t.Errorf("image RAM %s holds %d MiB of a 256 MiB guest: not made sparse", f, mib)
		}
	}
}
