package node

import (
	"testing"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
	"github.com/zeish/zeish/vmm/vmmfake"
)

// withCaps runs the harness's node on a fake driver declaring caps.
func withCaps(t *testing.T, caps vmm.Capabilities) func(*Options) {
	return func(o *Options) {
		drv, err := vmmfake.New(vmmfake.Options{ShmDir: o.ShmDir, Capabilities: &caps})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(drv.Close)
		o.Driver = drv
	}
}

// The node asks the driver what it can do: a driver that cannot fork or
// suspend gets no fork or stop (refused up front, the sandbox untouched),
// and one that cannot capture live has a child forked by promotion.
func TestDriverCapabilities(t *testing.T) {
	all := vmm.Capabilities{Name: "fake", Accel: vmm.AccelTCG, LiveFork: true, Suspend: true, LiveCapture: true}
	cases := []struct {
		name    string
		caps    func(c *vmm.Capabilities)
		promote bool // Options.StoppedPromotion
		op      func(h *harness, id string) error
		err     error
		live    int // CaptureLive calls
		promo   int // Promote calls
	}{
		{name: "no live fork", caps: func(c *vmm.Capabilities) { c.LiveFork = false }, err: errdefs.ErrInvalidState,
			op: func(h *harness, id string) error {
				_, _, err := h.n.Clone(h.ctx, id, []*store.SandboxRecord{{}})
				return err
			}},
		{name: "no suspend", caps: func(c *vmm.Capabilities) { c.Suspend = false }, err: errdefs.ErrInvalidState,
			op: func(h *harness, id string) error { _, err := h.n.Stop(h.ctx, id); return err }},
		{name: "no live capture", caps: func(c *vmm.Capabilities) { c.LiveCapture = false }, promo: 1,
			op: func(h *harness, id string) error { _, err := h.n.CreateSnapshot(h.ctx, id, "s"); return err }},
		{name: "stopped promotion asked", caps: func(*vmm.Capabilities) {}, promote: true, promo: 1,
			op: func(h *harness, id string) error { _, err := h.n.CreateSnapshot(h.ctx, id, "s"); return err }},
		{name: "live capture", caps: func(*vmm.Capabilities) {}, live: 1,
			op: func(h *harness, id string) error { _, err := h.n.CreateSnapshot(h.ctx, id, "s"); return err }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			caps := all
			c.caps(&caps)
			h := newHarness(t, withCaps(t, caps), func(o *Options) { o.StoppedPromotion = c.promote })
			// A fork child: its RAM is its image's, so how it is captured
			// depends on what the driver can do (the fork of the parent
			// itself needs no live fork capability of its own here).
			parent := h.create("parent", sandbox.StateRunning).ID
			id := parent
			if caps.LiveFork {
				id = h.clone(parent, 1, sandbox.StateRunning)[0].ID
			}
			live, promo := h.drv.Calls(vmmfake.OpCaptureLive), h.drv.Calls(vmmfake.OpPromote)
			if err := c.op(h, id); !isErr(err, c.err) {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			h.settle(id, sandbox.StateRunning)
			if got := h.drv.Calls(vmmfake.OpCaptureLive) - live; got != c.live {
				t.Errorf("%d live captures, want %d", got, c.live)
			}
			if got := h.drv.Calls(vmmfake.OpPromote) - promo; got != c.promo {
				t.Errorf("%d promotions, want %d", got, c.promo)
			}
			h.requireAgent(id)
			h.requireConsistent()
			h.deleteAll()
		})
	}
}
