package node

import (
	"context"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// Rejoin makes this node's sandboxes that the control plane marked lost
// (error node_lost, after missed heartbeats) usable again where their VM
// still runs: a paused one paused, any other running with its agent
// connected. A sandbox whose VM is gone stays error: nothing is deleted.
// The node agent calls it after Recover and after every heartbeat (a
// network partition heals without a restart).
func (n *Node) Rejoin(ctx context.Context) {
	rows, err := n.opts.Store.ListSandboxes(ctx, store.SandboxFilter{States: sandbox.Needs(sandbox.OpRejoined)})
	if err != nil {
		n.log.Warn("rejoin: list sandboxes", "err", err)
		return
	}
	for _, r := range rows {
		if r.Host != n.opts.ID || r.ErrorCode != sandbox.ErrNodeLost || n.busy(r.ID) {
			continue
		}
		h, _ := r.VMHandle()
		if h == nil || !n.opts.Driver.Alive(h) {
			n.log.Warn("rejoin: the VM of a sandbox lost with this node is gone; it stays error", logSandbox, r.ID)
			continue
		}
		n.run(r.ID, func(ctx context.Context) { n.rejoin(ctx, r.ID) })
	}
}

func (n *Node) rejoin(ctx context.Context, id string) {
	r, err := n.opts.Store.GetSandbox(ctx, id)
	if err != nil || r.ErrorCode != sandbox.ErrNodeLost {
		return
	}
	op := sandbox.RejoinOp(r.LostFrom)
	if !sandbox.Allows(r.State, op) {
		return
	}
	h, _ := r.VMHandle()
	if h == nil {
		return
	}
	log := n.log.With(logSandbox, id, "was", r.LostFrom)
	if op == sandbox.OpRejoined {
		// A VM caught paused mid-capture would never answer: let it run.
		if st, err := n.opts.Driver.State(ctx, h); err == nil && st == vmm.RunStatePaused {
			if err := n.opts.Driver.Resume(ctx, h); err != nil {
				log.Warn("rejoin: resume", "err", err)
			}
		}
		connect := n.attach // a boot the loss interrupted: configure the guest
		if r.LostFrom.Configured() {
			connect = n.reattach
		}
		if err := connect(ctx, id, h); err != nil {
			log.Warn("rejoin: the agent does not answer; the sandbox stays error", "err", err)
			return
		}
	}
	log.Info("rejoin: the VM outlived the node's absence")
	n.transition(ctx, id, op, "", func(r *store.SandboxRecord) { r.LostFrom = "" })
}
