package node

import (
	"context"
	"strconv"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// ReasonVMExited starts the state reason of a sandbox whose VM exited on
// its own (a crash, the OOM killer, kill -9).
const ReasonVMExited = "vm_exited"

// WatchVMs checks every interval, until ctx ends, that the VMs of running
// and paused sandboxes still run. One that exited on its own leaves its
// sandbox error with reason vm_exited (billing stops with running), its
// disk kept until the sandbox is deleted; other sandboxes are untouched.
func (n *Node) WatchVMs(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n.checkVMs(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (n *Node) checkVMs(ctx context.Context) {
	rows, err := n.opts.Store.ListSandboxes(ctx, store.SandboxFilter{States: sandbox.Needs(sandbox.OpVMExited)})
	if err != nil {
		n.log.Warn("vm watch: list sandboxes", "err", err)
		return
	}
	for _, r := range rows {
		h, _ := r.VMHandle()
		if r.Host != n.opts.ID || h == nil || n.busy(r.ID) {
			continue
		}
		if n.opts.Driver.Alive(h) {
			// The guest writes its console as much as it likes: keep the
			// log bounded (drivers that can).
			if t, ok := n.opts.Driver.(interface{ TrimConsole(*vmm.Handle) error }); ok {
				if err := t.TrimConsole(h); err != nil {
					n.log.Warn("trim console log", logSandbox, r.ID, "err", err)
				}
			}
			continue
		}
		pid := h.PID
		// As the sandbox's next operation, on a fresh read: an operation
		// (a capture, a promotion) replaces VMs on purpose.
		n.run(r.ID, func(ctx context.Context) {
			cur, err := n.opts.Store.GetSandbox(ctx, r.ID)
			if err != nil || !sandbox.Allows(cur.State, sandbox.OpVMExited) {
				return
			}
			h, _ := cur.VMHandle()
			if h == nil || h.PID != pid || n.opts.Driver.Alive(h) {
				return
			}
			n.log.Warn("vm exited on its own", logSandbox, r.ID, "pid", pid)
			n.agents.Drop(r.ID)
			n.failLost(ctx, r.ID, h, ReasonVMExited+": the VM process (pid "+strconv.Itoa(pid)+") exited")
		})
	}
}

// busy reports whether an operation is in progress on the sandbox.
func (n *Node) busy(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ops[id] != nil
}
