package node

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/vmm"
)

// guarded is the node's VMM driver with its errors reclassed: a driver's
// invalid_argument or invalid_state is about the spec or the VM the node
// made, never about the client's request, so it must not reach a client as a
// 400 or 409 with QEMU's words. A driver error is internal, unless the
// driver says the VM is unavailable (or timed out), which a client may
// retry. The words stay in the error for the log and in a sandbox's
// error_message; the HTTP layer shows no 5xx text.
//
// Methods the Driver interface gains later pass through unguarded (the
// interface is embedded) until they are listed here.
type guarded struct{ vmm.Driver }

func guardDriver(d vmm.Driver) vmm.Driver {
	if d == nil {
		return nil
	}
	if _, ok := d.(guarded); ok {
		return d
	}
	return guarded{d}
}

// driverErr reclasses err, from the driver's operation op.
func driverErr(op string, err error) error {
	if err == nil {
		return nil
	}
	as := errdefs.ErrInternal
	if errdefs.Is(err, errdefs.ClassUnavailable) {
		as = errdefs.Of(err)
	}
	return errdefs.Reclass(fmt.Errorf("vmm %s: %w", op, err), as)
}

func (g guarded) Start(ctx context.Context, spec vmm.Spec) (*vmm.Handle, error) {
	h, err := g.Driver.Start(ctx, spec)
	return h, driverErr("start", err)
}

func (g guarded) Pause(ctx context.Context, h *vmm.Handle) error {
	return driverErr("pause", g.Driver.Pause(ctx, h))
}

func (g guarded) Resume(ctx context.Context, h *vmm.Handle) error {
	return driverErr("resume", g.Driver.Resume(ctx, h))
}

func (g guarded) State(ctx context.Context, h *vmm.Handle) (vmm.RunState, error) {
	st, err := g.Driver.State(ctx, h)
	return st, driverErr("state", err)
}

func (g guarded) DialAgent(ctx context.Context, h *vmm.Handle) (net.Conn, error) {
	c, err := g.Driver.DialAgent(ctx, h)
	return c, driverErr("dial agent", err)
}

func (g guarded) Destroy(ctx context.Context, h *vmm.Handle) error {
	return driverErr("destroy", g.Driver.Destroy(ctx, h))
}

func (g guarded) Adopt(ctx context.Context, h *vmm.Handle, spec vmm.Spec) (*vmm.Handle, error) {
	nh, err := g.Driver.Adopt(ctx, h, spec)
	return nh, driverErr("adopt", err)
}

func (g guarded) Load(ctx context.Context, h *vmm.Handle, img *vmm.Image, run bool) error {
	return driverErr("load", g.Driver.Load(ctx, h, img, run))
}

func (g guarded) Capture(ctx context.Context, h *vmm.Handle, dir string, full bool) (*vmm.Image, time.Time, error) {
	img, at, err := g.Driver.Capture(ctx, h, dir, full)
	return img, at, driverErr("capture", err)
}

func (g guarded) Promote(ctx context.Context, h *vmm.Handle, dir string) (*vmm.Handle, time.Duration, error) {
	nh, d, err := g.Driver.Promote(ctx, h, dir)
	return nh, d, driverErr("promote", err)
}

func (g guarded) CaptureLive(ctx context.Context, h *vmm.Handle, dir string, swap vmm.DiskSwap) (*vmm.Image, time.Duration, error) {
	img, p, err := g.Driver.CaptureLive(ctx, h, dir, swap)
	return img, p, driverErr("live capture", err)
}

func (g guarded) SettleCapture(ctx context.Context, h *vmm.Handle, dir string, swap vmm.DiskSwap, run bool) error {
	return driverErr("settle capture", g.Driver.SettleCapture(ctx, h, dir, swap, run))
}

// TrimConsole keeps the optional console trimming of drivers that have it
// (vmwatch.go asks for it by interface).
func (g guarded) TrimConsole(h *vmm.Handle) error {
	if t, ok := g.Driver.(interface{ TrimConsole(*vmm.Handle) error }); ok {
		return t.TrimConsole(h)
	}
	return nil
}
