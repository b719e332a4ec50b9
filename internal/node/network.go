package node

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/node/ready"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// A sandbox's network is one of three:
//   - managed (the node has a network.Manager and r.Network.Enabled): a TAP
//     and a routed /30 of its own, the address kept for the sandbox's life;
//   - none (r.Network.Enabled false): no network card at all;
//   - legacy (the node runs without networking, r.Network nil): a card with
//     no way out, and an address that is only an identity.

func (n *Node) managedNet(r *store.SandboxRecord) bool {
	return n.opts.Network != nil && r.Network != nil && r.Network.Enabled && r.Address != ""
}

// assignNetwork gives a new sandbox (created or forked) its address: the
// link of the ready VM it took (nil: none), else a new one.
func (n *Node) assignNetwork(r *store.SandboxRecord, taken *ready.VM) error {
	if n.opts.Network == nil {
		if r.Network != nil && r.Network.Enabled {
			return fmt.Errorf("networking is off on this node (ZEISH_NET=off): %w", errdefs.ErrInvalidArgument)
		}
		if r.Network == nil {
			r.Address = newAddress()
		}
		return nil
	}
	if r.Network == nil {
		r.Network = &sandbox.Network{Enabled: true, Egress: sandbox.EgressAllow, Allow: []string{}, Deny: []string{}}
	}
	if !r.Network.Enabled {
		r.Address = ""
		return nil
	}
	if err := n.fillRates(r.Network); err != nil {
		return err
	}
	if taken != nil && taken.Address != "" {
		r.Address = taken.Address
		return nil
	}
	l, err := n.opts.Network.Allocate()
	if err != nil {
		return fmt.Errorf("%v: %w", err, errdefs.ErrNodeFull)
	}
	r.Address = l.Guest.String()
	return nil
}

// fillRates puts the node's default rates into p where it asks for none, and
// refuses rates above them: the operator's default is also the most a
// sandbox may have.
func (n *Node) fillRates(p *sandbox.Network) error {
	def := n.opts.Network.Rates()
	for _, f := range []struct {
		name string
		v    *int64
		def  int64
	}{{"rate_bytes_per_second", &p.RateBytes, def.Bytes}, {"rate_packets_per_second", &p.RatePackets, def.Packets}} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case f.def > 0 && *f.v > f.def:
			return fmt.Errorf("network.%s %d: at most the node's %d: %w", f.name, *f.v, f.def, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// attachNetwork makes the sandbox's TAP and firewall (again, idempotently).
func (n *Node) attachNetwork(r *store.SandboxRecord) error {
	if !n.managedNet(r) {
		return nil
	}
	_, err := n.opts.Network.Attach(r.Address, *r.Network)
	return err
}

// NetBytes is what r's network card received and sent over the sandbox's
// life: the links it had before, plus its current one's counters.
func (n *Node) NetBytes(r *store.SandboxRecord) (in, out uint64) {
	in, out = r.NetIn, r.NetOut
	if n.managedNet(r) && r.State.Live() && !r.NetKept {
		if c, err := n.opts.Network.Counters(r.Address); err == nil {
			in, out = in+c.In, out+c.Out
		}
	}
	return in, out
}

// keepNetBytes records the counters of r's link in the sandbox before the
// link goes, so usage still shows them once it is deleted. It runs once
// the VM is destroyed (the counters stand still) and once only: a delete
// retried after a later step failed finds NetKept set.
func (n *Node) keepNetBytes(ctx context.Context, r *store.SandboxRecord) error {
	if !n.managedNet(r) || r.NetKept {
		return nil
	}
	c, err := n.opts.Network.Counters(r.Address)
	if err != nil {
		return nil // no TAP: nothing counted on it
	}
	_, err = n.opts.Store.UpdateSandbox(ctx, r.ID, func(cur *store.SandboxRecord) error {
		if !cur.NetKept {
			cur.NetIn, cur.NetOut, cur.NetKept = cur.NetIn+c.In, cur.NetOut+c.Out, true
		}
		return nil
	})
	return err
}

// releaseNetwork removes the sandbox's TAP and firewall and frees its address.
func (n *Node) releaseNetwork(r *store.SandboxRecord) error {
	if !n.managedNet(r) {
		return nil
	}
	return n.opts.Network.Detach(r.Address)
}

// nicSpec puts the sandbox's network card into the spec of its next VM.
func (n *Node) nicSpec(r *store.SandboxRecord, spec *vmm.Spec) {
	switch {
	case r.Network != nil && !r.Network.Enabled:
		spec.NoNIC = true
	case n.managedNet(r):
		if l, err := n.opts.Network.LinkOf(r.Address); err == nil {
			spec.NIC = &vmm.NIC{TAP: l.TAP, MAC: r.MAC}
		}
	}
}

// guestNetwork is the network identity the guest is given on every boot,
// fork and restore.
func (n *Node) guestNetwork(r *store.SandboxRecord) *guest.Network {
	switch {
	case r.Network != nil && !r.Network.Enabled:
		return nil
	case n.managedNet(r):
		l, err := n.opts.Network.LinkOf(r.Address)
		if err != nil {
			return nil
		}
		gw := l.Gateway.String()
		return &guest.Network{Interface: "eth0", MAC: r.MAC, Address: l.GuestCIDR(), Gateway: gw, DNS: []string{gw}}
	}
	return &guest.Network{Interface: "eth0", MAC: r.MAC, Address: r.Address + "/16"}
}

// linkNetwork is the identity of a guest on a managed link of its own
// that is not (yet) a sandbox's: a warm build's, a ready VM's.
func (n *Node) linkNetwork(address, mac string) *guest.Network {
	return n.guestNetwork(&store.SandboxRecord{Sandbox: sandbox.Sandbox{Network: &sandbox.Network{Enabled: true}, Address: address}, MAC: mac})
}

// childNetwork decides a fork child's network: the parent's policy unless
// the child brings one; a child has a network card exactly when its parent
// has (it resumes the parent's machine).
func (n *Node) childNetwork(parent, c *store.SandboxRecord) error {
	if c.Network == nil {
		if parent.Network != nil {
			p := *parent.Network
			p.Allow, p.Deny = slices.Clone(p.Allow), slices.Clone(p.Deny)
			c.Network = &p
		}
	} else {
		enabled := parent.Network == nil || parent.Network.Enabled
		if n.opts.Network == nil && parent.Network == nil {
			enabled = false
		}
		if c.Network.Enabled != enabled {
			return fmt.Errorf("network.enabled: a fork has a network card exactly when its parent has (%v): %w", enabled, errdefs.ErrInvalidArgument)
		}
	}
	return n.assignNetwork(c, nil)
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
	if !n.managedNet(cur) {
		return nil, fmt.Errorf("sandbox %s has no network: %w", id, errdefs.ErrInvalidState)
	}
	p.Enabled = true
	if err := n.fillRates(&p); err != nil {
		return nil, err
	}
	if err := n.opts.Network.SetPolicy(cur.Address, p); err != nil {
		return nil, err
	}
	return n.opts.Store.UpdateSandbox(ctx, id, func(r *store.SandboxRecord) error {
		r.Network = &p
		return nil
	})
}

// recoverNetwork re-attaches the network of every sandbox that still has
// one, then removes TAPs nobody claims. The ruleset itself was rebuilt when
// the manager opened.
func (n *Node) recoverNetwork(rows []*store.SandboxRecord) {
	if n.opts.Network == nil {
		return
	}
	for _, r := range rows {
		if r.Host != n.opts.ID || !r.State.Live() {
			continue
		}
		if err := n.attachNetwork(r); err != nil {
			n.log.Error("recover: network", logSandbox, r.ID, "err", err)
		}
	}
	if err := n.opts.Network.Sweep(); err != nil {
		n.log.Warn("recover: sweep taps", "err", err)
	}
	n.opts.Network.StartWarm(readyLinks)
}

// readyLinks is how many guest links the node keeps made ahead, so that a
// create or fork (even a fork of a few children) finds its TAP ready.
const readyLinks = 4

// releaseNetworks frees the addresses of children that were never recorded.
func (n *Node) releaseNetworks(children []*store.SandboxRecord) {
	for _, c := range children {
		if c.Address != "" {
			n.releaseNetwork(c)
		}
	}
}

// PortAddr is where zeishd reaches port of a sandbox's guest (its routed
// address; zeishd is on the host end of every link).
func (n *Node) PortAddr(r *store.SandboxRecord, port int) (string, error) {
	if !n.managedNet(r) {
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
		if !n.managedNet(r) {
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
