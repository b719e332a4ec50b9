package vmmfake

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/vmm"
	"github.com/zeish/zeish/vmm/vmmtest"
)

// newSpec returns a spec whose kernel, initrd and base disk exist (the fake
// checks they do, as a VMM would), with a unique id and a fresh Dir.
func newSpec(t *testing.T) vmm.Spec {
	t.Helper()
	art := t.TempDir()
	for _, f := range []string{"vmlinuz", "initrd", "base.img"} {
		if err := os.WriteFile(filepath.Join(art, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return vmm.Spec{ID: "t" + randomHex(6), Dir: t.TempDir(), Kernel: filepath.Join(art, "vmlinuz"),
		Initrd: filepath.Join(art, "initrd"), BaseDisk: filepath.Join(art, "base.img"),
		DiskMiB: 128, MemoryMiB: 256, VCPUs: 1, MAC: "52:54:00:12:34:56"}
}

func newDriver(t *testing.T) (*Driver, string) {
	t.Helper()
	shm := t.TempDir()
	d, err := New(Options{ShmDir: shm})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d, shm
}

// The fake keeps the contract the QEMU driver keeps, but for confinement.
func TestConformance(t *testing.T) {
	d, shm := newDriver(t)
	vmmtest.Run(t, d, newSpec, vmmtest.ShmDir(shm), vmmtest.Unconfined())
}

// The fake's guest agent answers a real guest.Client, and a VM's hostname
// is what Configure set.
func TestAgent(t *testing.T) {
	d, _ := newDriver(t)
	ctx := context.Background()
	h, err := d.Start(ctx, newSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	c, err := guest.Connect(ctx, func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, h) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Configure(ctx, guest.Config{Hostname: "box"}); err != nil {
		t.Fatal(err)
	}
	if vms := d.VMs(); len(vms) != 1 || vms[0].Hostname != "box" || vms[0].Configs != 1 {
		t.Errorf("VMs = %+v, want one configured as box", vms)
	}
	// A crash ends the agent's connection.
	d.Kill(h)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Error("the agent connection outlived its VM")
	}
}

// FailNth fails exactly the nth call from now, before it changes anything;
// a hook sees every call.
func TestFailNth(t *testing.T) {
	d, _ := newDriver(t)
	ctx := context.Background()
	d.FailNth(OpStart, 2)
	spec := newSpec(t)
	h, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	spec2 := newSpec(t)
	if _, err := d.Start(ctx, spec2); !errors.Is(err, ErrInjected) {
		t.Fatalf("second Start: %v, want an injected failure", err)
	}
	if entries, _ := os.ReadDir(spec2.Dir); len(entries) > 0 {
		t.Errorf("a failed Start left %d files", len(entries))
	}
	h3, err := d.Start(ctx, spec2)
	if err != nil {
		t.Fatalf("third Start: %v", err)
	}
	defer d.Destroy(ctx, h3)
	var seen []Op
	d.SetHook(func(op Op, id string) error {
		seen = append(seen, op)
		if op == OpPause {
			return errors.New("no")
		}
		return nil
	})
	if err := d.Pause(ctx, h); err == nil {
		t.Error("Pause succeeded despite the hook")
	}
	if st, _ := d.State(ctx, h); st != vmm.RunStateRunning {
		t.Errorf("a refused Pause left the guest %s", st)
	}
	if d.Calls(OpStart) != 3 || len(seen) != 2 {
		t.Errorf("calls: start %d, hook saw %v", d.Calls(OpStart), seen)
	}
}
