package main

import (
	"context"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/network"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
)

// BenchmarkNetworkAttach is the host side of what networking adds to a
// create or a fork: take a link from the pool, make its TAP (netlink) and
// its firewall chain and sets (one nftables transaction), and remove them
// again on delete. It runs in a NetLab namespace, never the host's.
//
//	go test ./bench -run '^$' -bench NetworkAttach
func BenchmarkNetworkAttach(b *testing.B) {
	lab := testenv.NewNetLab(b)
	var m *network.Manager
	in := func(f func() error) {
		if err := testenv.InNetns(lab.Node, f); err != nil {
			b.Fatal(err)
		}
	}
	in(func() (err error) {
		m, err = network.Open(context.Background(), network.Config{CIDR: "10.213.0.0/16", Uplink: lab.Uplink, Upstreams: []string{lab.DNS}, AllowRanges: []string{testenv.LabRange}})
		return err
	})
	defer in(m.Close)
	policy := sandbox.Network{Enabled: true, Egress: sandbox.EgressDeny, Allow: []string{"198.18.5.0/24", "allowed.test"}}
	b.Run("attach", func(b *testing.B) {
		var guests []string
		for b.Loop() {
			in(func() error {
				l, err := m.Allocate()
				if err != nil {
					return err
				}
				guests = append(guests, l.Guest.String())
				_, err = m.Attach(l.Guest.String(), policy)
				return err
			})
		}
		b.StopTimer()
		for _, g := range guests {
			in(func() error { return m.Detach(g) })
		}
	})
	// What a create or fork pays when a ready link waits (the node keeps
	// four made ahead, and creates come seconds apart).
	b.Run("attach-ready", func(b *testing.B) {
		m.StartWarm(4)
		var guests []string
		for b.Loop() {
			b.StopTimer()
			for m.Ready() == 0 {
				time.Sleep(time.Millisecond)
			}
			b.StartTimer()
			in(func() error {
				l, err := m.Allocate()
				if err != nil {
					return err
				}
				guests = append(guests, l.Guest.String())
				_, err = m.Attach(l.Guest.String(), policy)
				return err
			})
		}
		b.StopTimer()
		for _, g := range guests {
			in(func() error { return m.Detach(g) })
		}
	})
	b.Run("attach+detach", func(b *testing.B) {
		for b.Loop() {
			in(func() error {
				l, err := m.Allocate()
				if err != nil {
					return err
				}
				if _, err = m.Attach(l.Guest.String(), policy); err != nil {
					return err
				}
				return m.Detach(l.Guest.String())
			})
		}
	})
	b.Run("set-policy", func(b *testing.B) {
		var l network.Link
		in(func() (err error) {
			if l, err = m.Allocate(); err == nil {
				_, err = m.Attach(l.Guest.String(), policy)
			}
			return err
		})
		for b.Loop() {
			in(func() error { return m.SetPolicy(l.Guest.String(), policy) })
		}
		in(func() error { return m.Detach(l.Guest.String()) })
	})
}
