package node

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// A sandbox's network (its address, link, card and guest identity) is
// kept by internal/node/sandboxnet (n.links); these are the calls on it
// that the control plane makes.

// NetBytes is what r's network card received and sent over the sandbox's
// life: the links it had before, plus its current one's counters.
func (n *Node) NetBytes(r *store.SandboxRecord) (in, out uint64) { return n.links.Bytes(r) }

// keepNetBytes records the counters of r's link in the sandbox before the
// link goes, so usage still shows them once it is deleted. It runs once
// the VM is destroyed (the counters stand still) and once only: a delete
// retried after a later step failed finds NetKept set.
func (n *Node) keepNetBytes(ctx context.Context, r *store.SandboxRecord) error {
	if r.NetKept {
		return nil
	}
	c, ok := n.links.Counters(r)
	if !ok {
		return nil // no TAP: nothing counted on it
	}
	_, err := n.opts.Store.UpdateSandbox(ctx, r.ID, func(cur *store.SandboxRecord) error {
		if !cur.NetKept {
			cur.NetIn, cur.NetOut, cur.NetKept = cur.NetIn+c.In, cur.NetOut+c.Out, true
		}
		return nil
	})
	return err
}

// SetNetwork replaces a sandbox's egress policy, live. p comes normalized.
func (n *Node) SetNetwork(ctx context.Context, id string, p sandbox.Network) (*store.SandboxRecord, error) {
	cur, err := n.opts.Store.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	if _, err := sandbox.NextFor(id, cur.State, sandbox.OpSetNetwork); err != nil {
		return nil, err
	}
	if err := n.links.SetPolicy(cur, &p); err != nil {
		return nil, err
	}
	return n.opts.Store.UpdateSandbox(ctx, id, func(r *store.SandboxRecord) error {
		r.Network = &p
		return nil
	})
}

// PortAddr is where zeishd reaches port of a sandbox's guest (its routed
// address; zeishd is on the host end of every link).
func (n *Node) PortAddr(r *store.SandboxRecord, port int) (string, error) {
	if !n.links.Managed(r) {
		return "", fmt.Errorf("sandbox %s has no network: %w", r.ID, errdefs.ErrInvalidState)
	}
	if _, err := sandbox.NextFor(r.ID, r.State, sandbox.OpAccess); err != nil {
		return "", err
	}
	return net.JoinHostPort(r.Address, strconv.Itoa(port)), nil
}

// SetPortPublic opens a guest port to requests without a token, or closes it.
func (n *Node) SetPortPublic(ctx context.Context, id string, port int, public bool) (*store.SandboxRecord, error) {
	return n.opts.Store.UpdateSandbox(ctx, id, func(r *store.SandboxRecord) error {
		if _, err := sandbox.NextFor(id, r.State, sandbox.OpSetNetwork); err != nil {
			return err
		}
		if !n.links.Managed(r) {
			return fmt.Errorf("sandbox %s has no network: %w", id, errdefs.ErrInvalidState)
		}
		r.PublicPorts = slices.DeleteFunc(r.PublicPorts, func(p int) bool { return p == port })
		if public {
			r.PublicPorts = append(r.PublicPorts, port)
			slices.Sort(r.PublicPorts)
		}
		return nil
	})
}
