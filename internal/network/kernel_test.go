package network

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
)

// TestManagerKernelObjects builds, changes and removes the real kernel
// objects inside a lab namespace (never the host's): the TAP with its
// gateway, the table with a guest's chain and sets, and removal by Detach,
// by Sweep after a "crash", and of the table by Close.
func TestManagerKernelObjects(t *testing.T) {
	lab := testenv.NewNetLab(t)
	in := func(f func() error) {
		t.Helper()
		if err := testenv.InNetns(lab.Node, f); err != nil {
			t.Fatal(err)
		}
	}
	sh := func(args ...string) string {
		t.Helper()
		out, err := testenv.Exec(lab.Node, args[0], args[1:]...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return out
	}
	cfg := Config{CIDR: "10.213.0.0/24", Uplink: lab.Uplink, Upstreams: []string{lab.DNS}, AllowRanges: []string{testenv.LabRange}, Rates: Rates{Bytes: 1 << 20, Packets: 1000}}
	var m *Manager
	in(func() (err error) { m, err = Open(context.Background(), cfg); return })
	var l Link
	in(func() (err error) {
		if l, err = m.Allocate(); err != nil {
			return err
		}
		_, err = m.Attach(l.Guest.String(), sandbox.Network{Enabled: true, Egress: sandbox.EgressDeny, Allow: []string{"198.18.5.0/24", "allowed.test"}})
		return err
	})
	if out := sh("ip", "-4", "addr", "show", l.TAP); !strings.Contains(out, "10.213.0.1/30") {
		t.Fatalf("tap has no gateway address:\n%s", out)
	}
	if out := sh("sysctl", "-n", "net.ipv4.ip_forward"); strings.TrimSpace(out) != "1" {
		t.Fatalf("forwarding off in the node namespace: %q", out)
	}
	table := sh("nft", "list", "table", "inet", "zeish")
	for _, want := range []string{"chain g-zt-0", "198.18.5.0/24", `iifname "zt-0" jump g-zt-0`, "masquerade", "redirect to :", "169.254.0.0/16",
		`oifname "zt-0" jump l-zt-0`, "limit rate over 1 mbytes/second", "limit rate over 1000/second"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	// Attach again (a restart) is idempotent; a live policy change replaces the sets.
	in(func() error {
		_, err := m.Attach(l.Guest.String(), sandbox.Network{Enabled: true, Egress: sandbox.EgressAllow, Deny: []string{"198.18.6.6"}, RateBytes: 64 << 10})
		return err
	})
	table = sh("nft", "list", "table", "inet", "zeish")
	if strings.Contains(table, "198.18.5.0/24") || !strings.Contains(table, "198.18.6.6") || strings.Count(table, "jump g-zt-0") != 1 ||
		strings.Count(table, "jump l-zt-0") != 1 || strings.Count(table, "limit rate over 64 kbytes/second") != 2 || strings.Contains(table, "mbytes/second") {
		t.Fatalf("policy not replaced cleanly:\n%s", table)
	}
	// The link's counters come from its TAP (nothing ran on it: zero).
	var c Counters
	in(func() (err error) { c, err = m.Counters(l.Guest.String()); return })
	if c != (Counters{}) {
		t.Fatalf("counters of an unused link: %+v", c)
	}
	// DNS learning puts an address in the guest's dynamic set with a timeout.
	in(func() error { return m.learn(l.TAP, true, []netipAddr{mustAddr("198.18.7.7")}, MinLearnTTL) })
	if table = sh("nft", "list", "set", "inet", "zeish", "ad-zt-0"); !strings.Contains(table, "198.18.7.7 timeout") && !strings.Contains(table, "198.18.7.7 expires") {
		t.Fatalf("learned address missing:\n%s", table)
	}
	// A second, unattached TAP (a crash between a delete's steps) goes at Sweep.
	var l2 Link
	in(func() (err error) {
		l2, _ = m.Allocate()
		if _, err = m.Attach(l2.Guest.String(), sandbox.Network{Enabled: true}); err != nil {
			return err
		}
		m.mu.Lock()
		delete(m.guests, l2.Guest)
		m.mu.Unlock()
		return m.Sweep()
	})
	if out := sh("ip", "link"); strings.Contains(out, l2.TAP+":") || !strings.Contains(out, l.TAP+":") {
		t.Fatalf("sweep: want %s gone and %s kept:\n%s", l2.TAP, l.TAP, out)
	}
	in(func() error { return m.Detach(l.Guest.String()) })
	if out := sh("ip", "link"); strings.Contains(out, "zt-") {
		t.Fatalf("taps left after detach:\n%s", out)
	}
	if table = sh("nft", "list", "table", "inet", "zeish"); strings.Contains(table, "g-zt-") || strings.Contains(table, "l-zt-") {
		t.Fatalf("guest chain left after detach:\n%s", table)
	}
	// Ready links: made ahead, handed out by Allocate, removed at Close.
	m.StartWarm(2)
	for i := 0; m.Ready() < 2; i++ {
		if i == 100 {
			t.Fatalf("ready links: %d after 10 s", m.Ready())
		}
		time.Sleep(100 * time.Millisecond)
	}
	in(m.Sweep) // keeps them
	if out := sh("ip", "link"); strings.Count(out, " zt-") != 2 {
		t.Fatalf("want two ready taps:\n%s", out)
	}
	var ready Link
	in(func() (err error) { ready, err = m.Allocate(); return })
	if out := sh("ip", "-4", "addr", "show", ready.TAP); !strings.Contains(out, ready.Gateway.String()+"/30") {
		t.Fatalf("a ready link's tap is not made:\n%s", out)
	}
	in(func() error { _, err := m.Attach(ready.Guest.String(), sandbox.Network{Enabled: true}); return err })
	in(func() error { return m.Detach(ready.Guest.String()) })
	in(m.Close)
	if out := sh("ip", "link"); strings.Contains(out, "zt-") {
		t.Fatalf("taps left after close:\n%s", out)
	}
	if out, _ := testenv.Exec(lab.Node, "nft", "list", "tables"); strings.Contains(out, "zeish") {
		t.Fatalf("table left after close with no guests:\n%s", out)
	}
}

type netipAddr = netip.Addr

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
