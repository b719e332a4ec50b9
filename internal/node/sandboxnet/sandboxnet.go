// Package sandboxnet keeps the network side of a node's sandboxes: which
// address each has, its link (a TAP, a routed /30 and its firewall chain,
// made by internal/network), the card its VM gets and the identity its
// guest is told. A sandbox's network is one of three:
//   - managed (the node has a network.Manager and r.Network.Enabled): a TAP
//     and a routed /30 of its own, the address kept for the sandbox's life;
//   - none (r.Network.Enabled false): no network card at all;
//   - legacy (the node runs without networking, r.Network nil): a card with
//     no way out, and an address that is only an identity.
package sandboxnet

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"slices"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/network"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// readyLinks is how many guest links the node keeps made ahead, so that a
// create or fork (even a fork of a few children) finds its TAP ready.
const readyLinks = 4

// Links are the network links of a node's sandboxes.
type Links struct {
	mgr *network.Manager // nil: the node runs without networking
	log *slog.Logger
}

// New keeps links with mgr (nil: none, every sandbox is legacy or none).
func New(mgr *network.Manager, log *slog.Logger) *Links {
	if log == nil {
		log = slog.Default()
	}
	return &Links{mgr: mgr, log: log}
}

// Managed says whether r has a link of its own.
func (l *Links) Managed(r *store.SandboxRecord) bool {
	return l.mgr != nil && r.Network != nil && r.Network.Enabled && r.Address != ""
}

// Assign gives a new sandbox (created or forked) its address: readyAddress,
// the link of a ready VM it took ("": none), else a new one.
func (l *Links) Assign(r *store.SandboxRecord, readyAddress string) error {
	if l.mgr == nil {
		if r.Network != nil && r.Network.Enabled {
			return fmt.Errorf("networking is off on this node (ZEISH_NET=off): %w", errdefs.ErrInvalidArgument)
		}
		if r.Network == nil {
			r.Address = NewAddress()
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
	if err := l.fillRates(r.Network); err != nil {
		return err
	}
	if readyAddress != "" {
		r.Address = readyAddress
		return nil
	}
	link, err := l.mgr.Allocate()
	if err != nil {
		return fmt.Errorf("%v: %w", err, errdefs.ErrNodeFull)
	}
	r.Address = link.Guest.String()
	return nil
}

// Child decides a fork child's network: the parent's policy unless the
// child brings one; a child has a network card exactly when its parent has
// (it resumes the parent's machine).
func (l *Links) Child(parent, c *store.SandboxRecord) error {
	if c.Network == nil {
		if parent.Network != nil {
			p := *parent.Network
			p.Allow, p.Deny = slices.Clone(p.Allow), slices.Clone(p.Deny)
			c.Network = &p
		}
	} else {
		enabled := parent.Network == nil || parent.Network.Enabled
		if l.mgr == nil && parent.Network == nil {
			enabled = false
		}
		if c.Network.Enabled != enabled {
			return fmt.Errorf("network.enabled: a fork has a network card exactly when its parent has (%v): %w", enabled, errdefs.ErrInvalidArgument)
		}
	}
	return l.Assign(c, "")
}

// fillRates puts the node's default rates into p where it asks for none,
// and refuses rates above them: the operator's default is also the most a
// sandbox may have.
func (l *Links) fillRates(p *sandbox.Network) error {
	def := l.mgr.Rates()
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

// SetPolicy replaces the egress policy of r's link, live: p (normalized)
// gets the node's default rates where it sets none.
func (l *Links) SetPolicy(r *store.SandboxRecord, p *sandbox.Network) error {
	if !l.Managed(r) {
		return fmt.Errorf("sandbox %s has no network: %w", r.ID, errdefs.ErrInvalidState)
	}
	p.Enabled = true
	if err := l.fillRates(p); err != nil {
		return err
	}
	return l.mgr.SetPolicy(r.Address, *p)
}

// Attach makes the sandbox's TAP and firewall (again, idempotently).
func (l *Links) Attach(r *store.SandboxRecord) error {
	if !l.Managed(r) {
		return nil
	}
	_, err := l.mgr.Attach(r.Address, *r.Network)
	return err
}

// Release removes the sandbox's TAP and firewall and frees its address.
func (l *Links) Release(r *store.SandboxRecord) error {
	if !l.Managed(r) {
		return nil
	}
	return l.mgr.Detach(r.Address)
}

// ReleaseAll frees the addresses of sandboxes that were never recorded.
func (l *Links) ReleaseAll(rs []*store.SandboxRecord) {
	for _, r := range rs {
		if r.Address != "" {
			l.Release(r)
		}
	}
}

// Bytes is what r's network card received and sent over the sandbox's
// life: the links it had before, plus its current one's counters.
func (l *Links) Bytes(r *store.SandboxRecord) (in, out uint64) {
	in, out = r.NetIn, r.NetOut
	if r.State.Live() && !r.NetKept {
		if c, ok := l.Counters(r); ok {
			in, out = in+c.In, out+c.Out
		}
	}
	return in, out
}

// Counters are the counters of r's current link, if it has one.
func (l *Links) Counters(r *store.SandboxRecord) (network.Counters, bool) {
	if !l.Managed(r) {
		return network.Counters{}, false
	}
	c, err := l.mgr.Counters(r.Address)
	return c, err == nil
}

// NIC puts the sandbox's network card into the spec of its next VM.
func (l *Links) NIC(r *store.SandboxRecord, spec *vmm.Spec) {
	switch {
	case r.Network != nil && !r.Network.Enabled:
		spec.NoNIC = true
	case l.Managed(r):
		if link, err := l.mgr.LinkOf(r.Address); err == nil {
			spec.NIC = &vmm.NIC{TAP: link.TAP, MAC: r.MAC}
		}
	}
}

// Guest is the network identity the guest is given on every boot, fork
// and restore.
func (l *Links) Guest(r *store.SandboxRecord) *guest.Network {
	switch {
	case r.Network != nil && !r.Network.Enabled:
		return nil
	case l.Managed(r):
		link, err := l.mgr.LinkOf(r.Address)
		if err != nil {
			return nil
		}
		gw := link.Gateway.String()
		return &guest.Network{Interface: "eth0", MAC: r.MAC, Address: link.GuestCIDR(), Gateway: gw, DNS: []string{gw}}
	}
	return &guest.Network{Interface: "eth0", MAC: r.MAC, Address: r.Address + "/16"}
}

// Link is the identity of a guest on a managed link of its own that is
// not (yet) a sandbox's: a warm build's, a ready VM's.
func (l *Links) Link(address, mac string) *guest.Network {
	return l.Guest(&store.SandboxRecord{Sandbox: sandbox.Sandbox{Network: &sandbox.Network{Enabled: true}, Address: address}, MAC: mac})
}

// Recover re-attaches the network of every live sandbox of node that
// still has one, then removes TAPs nobody claims, and starts keeping links
// made ahead. The ruleset itself was rebuilt when the manager opened.
func (l *Links) Recover(node string, rows []*store.SandboxRecord) {
	if l.mgr == nil {
		return
	}
	for _, r := range rows {
		if r.Host != node || !r.State.Live() {
			continue
		}
		if err := l.Attach(r); err != nil {
			l.log.Error("recover: network", "sandbox", r.ID, "err", err)
		}
	}
	if err := l.mgr.Sweep(); err != nil {
		l.log.Warn("recover: sweep taps", "err", err)
	}
	l.mgr.StartWarm(readyLinks)
}

// NewAddress picks a legacy guest's address in 10.88.0.0/16. The NIC is
// isolated (nothing routes to it), so the address is an identity, unique
// per sandbox with high probability.
func NewAddress() string {
	b := make([]byte, 2)
	rand.Read(b)
	if b[1] == 0 || b[1] == 255 {
		b[1] = 1
	}
	return fmt.Sprintf("10.88.%d.%d", b[0], b[1])
}
