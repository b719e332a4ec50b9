package qemu

import (
	"context"
	"net"
	"os"
	"testing"

	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/template"
	"github.com/zeish/zeish/vmm"
)

// baseVMs runs VMs of the real base template, agent included, for tests
// that need a working guest; everything they start goes at cleanup.
type baseVMs struct {
	t   *testing.T
	d   *Driver
	ctx context.Context
	tpl *template.Artifacts
}

func newBaseVMs(ctx context.Context, t *testing.T, d *Driver) *baseVMs {
	return &baseVMs{t: t, d: d, ctx: ctx, tpl: testenv.BaseTemplate(t)}
}

// spec is a 256 MiB, one-vCPU VM of the template in a fresh short folder.
func (b *baseVMs) spec(mac string) vmm.Spec {
	dir, err := os.MkdirTemp("", "zvm-")
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { os.RemoveAll(dir) })
	return vmm.Spec{ID: "t" + randomHex(6), Dir: dir, Kernel: b.tpl.Kernel, Initrd: b.tpl.Initrd, KernelArgs: b.tpl.KernelArgs,
		DiskMiB: 2048, MemoryMiB: 256, VCPUs: 1, MAC: mac}
}

func (b *baseVMs) start(spec vmm.Spec) *vmm.Handle {
	h, err := b.d.Start(b.ctx, spec)
	if err != nil {
		b.t.Fatalf("Start: %v", err)
	}
	b.t.Cleanup(func() { b.d.Destroy(context.Background(), h) })
	return h
}

func (b *baseVMs) agent(h *vmm.Handle) *guest.Client {
	c, err := guest.Connect(b.ctx, func(ctx context.Context) (net.Conn, error) { return b.d.DialAgent(ctx, h) })
	if err != nil {
		b.t.Fatalf("agent of %s: %v", h.Spec.Dir, err)
	}
	b.t.Cleanup(func() { c.Close() })
	return c
}
