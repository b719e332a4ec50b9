package network

import (
	"fmt"

	"github.com/google/nftables/expr"
)

// Rates is what a guest's link may carry per second, each way on its own;
// 0: no cap. Limits are policers in the guest's nftables chains (a packet
// over the rate is dropped, and TCP slows down to fit), so they live and go
// with the guest's firewall and are rebuilt with it after a restart. They
// apply to routed traffic (the uplink); the DNS forwarder and the port
// proxy, which zeishd itself serves, are not counted against them.
type Rates struct {
	Bytes, Packets int64
}

// Burst is how far above its rate a guest may go at once. The kernel's
// byte bucket holds one second of the rate plus the burst, so a guest may
// move at most Bytes·(t+1) + BytesBurst bytes in t seconds.
func (r Rates) BytesBurst() int64 { return r.Bytes / 8 }

// PacketsBurst: the packet bucket holds exactly the burst.
func (r Rates) PacketsBurst() int64 { return max(r.Packets/8, 16) }

// rateOf is the rate a sandbox asked for, or the node's default.
func rateOf(asked, def int64) int64 {
	if asked > 0 {
		return asked
	}
	return def
}

// limitRules are the expressions of the rules that drop what goes over r,
// each starting with match (a direction).
func limitRules(match []expr.Any, r Rates) [][]expr.Any {
	var out [][]expr.Any
	if r.Packets > 0 {
		out = append(out, cat(match, []expr.Any{&expr.Limit{Type: expr.LimitTypePkts, Rate: uint64(r.Packets),
			Unit: expr.LimitTimeSecond, Burst: uint32(r.PacketsBurst()), Over: true}}, counter(), verdict(expr.VerdictDrop)))
	}
	if r.Bytes > 0 {
		out = append(out, cat(match, []expr.Any{&expr.Limit{Type: expr.LimitTypePktBytes, Rate: uint64(r.Bytes),
			Unit: expr.LimitTimeSecond, Burst: uint32(r.BytesBurst()), Over: true}}, counter(), verdict(expr.VerdictDrop)))
	}
	return out
}

// Counters are the bytes a guest's link carried, as the guest sees them:
// In is what it received, Out what it sent (everything on its NIC: routed
// traffic, DNS, the port proxy).
type Counters struct {
	In, Out uint64
}

// Counters reads the guest's link counters from its TAP (the kernel keeps
// them with the device: they survive a restart of zeishd, start at 0 for a
// new link, and go with the link). The host's receive side is the guest's
// send side.
func (m *Manager) Counters(guest string) (Counters, error) {
	l, err := m.LinkOf(guest)
	if err != nil {
		return Counters{}, err
	}
	link, err := m.nl.LinkByName(l.TAP)
	if err != nil {
		return Counters{}, fmt.Errorf("tap %s: %w", l.TAP, err)
	}
	st := link.Attrs().Statistics
	if st == nil {
		return Counters{}, nil
	}
	return Counters{In: st.TxBytes, Out: st.RxBytes}, nil
}
