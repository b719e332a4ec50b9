package e2e

import (
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// labListen is where zeishd listens inside the lab's node namespace: every
// address, so that a guest failing to reach the API port proves the
// firewall, not a loopback-only listener.
const labListen = "0.0.0.0:7420"

// startLabServer runs zeishd inside a fresh NetLab: its only way out is the
// lab's internet, and the test reaches its API through a loopback relay.
func startLabServer(t *testing.T) (*server, *testenv.NetLab) {
	t.Helper()
	lab := testenv.NewNetLab(t)
	relay, err := lab.Relay(lab.Node, "127.0.0.1:7420")
	if err != nil {
		t.Fatal(err)
	}
	s := startServerWith(t, func(z *testenv.Zeishd) { z.Netns, z.Listen, z.Addr = lab.Node, labListen, relay },
		"ZEISH_UPLINK="+lab.Uplink, "ZEISH_DNS_UPSTREAM="+lab.DNS, "ZEISH_NET_CIDR=10.213.0.0/24")
	return s, lab
}

// netGuest is a sandbox with the nettool inside.
type netGuest struct {
	sb   zeish.Sandbox
	conn *zeish.SandboxConn
}

func newNetGuest(t *testing.T, s *server, sb zeish.Sandbox) *netGuest {
	t.Helper()
	conn := connect(t, s.client, sb.ID)
	f, err := os.Open(testenv.GoBuildStatic(t, "./e2e/nettool"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := conn.WriteFile(ctxFor(t, time.Minute), "/root/nettool", f, 0o755); err != nil {
		t.Fatal(err)
	}
	return &netGuest{sb: sb, conn: conn}
}

// try runs nettool in the guest: did it succeed, and what did it print.
func (g *netGuest) try(t *testing.T, args ...string) (bool, string) {
	t.Helper()
	out, errOut, res := run(t, g.conn, append([]string{"/root/nettool"}, args...)...)
	return res.ExitCode == 0, strings.TrimSpace(out + errOut)
}

func (g *netGuest) mustGet(t *testing.T, url, want string) {
	t.Helper()
	if ok, out := g.try(t, "get", url); !ok || !strings.Contains(out, want) {
		t.Fatalf("%s: get %s: ok=%v %q, want %q", g.sb.Name, url, ok, out, want)
	}
}

func (g *netGuest) mustFail(t *testing.T, what string, args ...string) {
	t.Helper()
	if ok, out := g.try(t, args...); ok {
		t.Fatalf("%s: %s (%v) succeeded: %q", g.sb.Name, what, args, out)
	}
}

// TestNetwork proves networking on real guests, inside a lab whose only
// internet is the test's own: egress by name and CIDR, isolation from the
// host, other sandboxes, metadata and private ranges, live policy changes,
// forks with their own address, a kill -9 of zeishd, bad input, and that
// nothing (TAP, nft table) is left once everything is deleted.
func TestNetwork(t *testing.T) {
	s, lab := startLabServer(t)
	ctx := ctxFor(t, 20*time.Minute)
	c := s.client

	t.Run("bad input changes nothing", func(t *testing.T) {
		for _, body := range []string{
			`{"network":{"allow":["1.2.3.4/33"]}}`,
			`{"network":{"deny":["300.1.1.1"]}}`,
			`{"network":{"allow":["foo.*.example.com"]}}`,
			`{"network":{"egress":"sometimes"}}`,
			`{"network":{"enabled":false,"egress":"deny"}}`,
			`{"network":{"nope":1}}`,
		} {
			if st, _, resp := s.raw(t, "POST", api.BasePath+"/public/sandboxes", s.key, body); st != 400 || errorCode(resp) != "invalid_argument" {
				t.Errorf("create %s: %d %s", body, st, resp)
			}
		}
		if list, _ := c.ListSandboxes(ctx, zeish.ListOptions{}); len(list) != 0 {
			t.Fatalf("a refused create left sandboxes: %+v", list)
		}
		if out, _ := testenv.Exec(lab.Node, "ip", "link"); strings.Contains(out, "zt-") {
			t.Fatalf("a refused create left a tap:\n%s", out)
		}
	})

	strict, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "net-strict", MemoryMiB: 256,
		Network: &api.NetworkRequest{Egress: sandbox.EgressDeny, Allow: []string{"allowed.test", testenv.LabHostC + "/32"}}}, zeish.Wait())
	if err != nil || strict.State != sandbox.StateRunning {
		t.Fatalf("create strict: %+v %v", strict, err)
	}
	open, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "net-open", MemoryMiB: 256}, zeish.Wait())
	if err != nil || open.State != sandbox.StateRunning {
		t.Fatalf("create open: %+v %v", open, err)
	}
	if n := strict.Network; n == nil || !n.Enabled || n.Egress != sandbox.EgressDeny || !slices.Equal(n.Allow, []string{"allowed.test", testenv.LabHostC}) {
		t.Fatalf("strict's network as shown: %+v", strict.Network)
	}
	if n := open.Network; n == nil || !n.Enabled || n.Egress != sandbox.EgressAllow || strict.Address == open.Address {
		t.Fatalf("open's network: %+v, addresses %s %s", open.Network, strict.Address, open.Address)
	}
	a, b := newNetGuest(t, s, strict), newNetGuest(t, s, open)
	if got := shell(t, a.conn, "ip -4 addr show eth0; ip route; cat /etc/resolv.conf"); !strings.Contains(got, strict.Address+"/30") || !strings.Contains(got, "default via 10.213.0.") {
		t.Fatalf("guest network configuration:\n%s", got)
	}

	t.Run("egress deny with allowed name and CIDR", func(t *testing.T) {
		a.mustGet(t, "http://allowed.test/", "hello from "+testenv.LabHostA)
		a.mustGet(t, "http://"+testenv.LabHostC+"/", "hello from "+testenv.LabHostC)
		a.mustFail(t, "a name not allowed", "get", "http://denied.test/")
		a.mustFail(t, "an address not allowed", "get", "http://"+testenv.LabHostB+"/")
		b.mustGet(t, "http://denied.test/", "hello from "+testenv.LabHostB)
	})

	t.Run("isolation", func(t *testing.T) {
		// The guest's own server, reachable from the host: what another guest
		// must not reach.
		run(t, a.conn, "sh", "-c", "/root/nettool serve 8080 </dev/null >/dev/null 2>&1 &")
		waitDial(t, lab.Node, strict.Address+":8080")
		gw := strings.TrimSuffix(strict.Address, ".2") + ".1"
		for _, dst := range []string{
			gw + ":7420",                // the API port on the guest's gateway
			lab.NodeAddr + ":7420",      // the API port on the host's other address
			open.Address + ":8080",      // unused, but: another sandbox
			testenv.LabMetadata + ":80", // cloud metadata
			testenv.LabPrivate + ":80",  // a private range
		} {
			b.mustFail(t, "isolation", "dial", dst)
		}
		b.mustFail(t, "another sandbox's server", "dial", strict.Address+":8080")
		// The same destinations answer from the host's side: the firewall, not
		// the lab, is what stops the guest.
		for _, dst := range []string{lab.NodeAddr + ":7420", testenv.LabMetadata + ":80", testenv.LabPrivate + ":80"} {
			waitDial(t, lab.Node, dst)
		}
	})

	t.Run("live policy change", func(t *testing.T) {
		got, err := c.SetNetwork(ctx, strict.ID, zeish.NetworkPolicyRequest{Allow: []string{"allowed.test", testenv.LabHostB}})
		if err != nil || !slices.Contains(got.Network.Allow, testenv.LabHostB) || got.Network.Egress != sandbox.EgressDeny {
			t.Fatalf("set network: %+v %v", got.Network, err)
		}
		a.mustGet(t, "http://"+testenv.LabHostB+"/", "hello from "+testenv.LabHostB)
		a.mustFail(t, "a CIDR no longer allowed", "get", "http://"+testenv.LabHostC+"/")
		if _, err := c.SetNetwork(ctx, open.ID, zeish.NetworkPolicyRequest{Deny: []string{"denied.test"}}); err != nil {
			t.Fatal(err)
		}
		b.mustFail(t, "a denied name", "get", "http://denied.test/")
		b.mustGet(t, "http://other.test/", "hello from "+testenv.LabHostC)
		// Bad input changes nothing.
		if _, err := c.SetNetwork(ctx, open.ID, zeish.NetworkPolicyRequest{Deny: []string{"10.0.0.0/40"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("bad cidr: %v", err)
		}
		if _, err := c.SetNetwork(ctx, open.ID, zeish.NetworkPolicyRequest{Allow: []string{"a.*.test"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("bad wildcard: %v", err)
		}
		if got, _ := c.GetSandbox(ctx, open.ID); !slices.Equal(got.Network.Deny, []string{"denied.test"}) || len(got.Network.Allow) != 0 {
			t.Fatalf("a refused change changed the policy: %+v", got.Network)
		}
		b.mustFail(t, "a denied name after a refused change", "get", "http://denied.test/")
	})

	t.Run("fork gets its own address and both reach out", func(t *testing.T) {
		res, err := c.CloneSandbox(ctx, open.ID, api.CloneRequest{Name: "net-child"}, zeish.Wait())
		if err != nil || len(res.Sandboxes) != 1 || res.Sandboxes[0].State != sandbox.StateRunning {
			t.Fatalf("clone: %+v %v", res, err)
		}
		kid := res.Sandboxes[0]
		if kid.Address == open.Address || kid.Address == "" || kid.Network == nil || !slices.Equal(kid.Network.Deny, []string{"denied.test"}) {
			t.Fatalf("child %s (parent %s), network %+v", kid.Address, open.Address, kid.Network)
		}
		k := &netGuest{sb: kid, conn: connect(t, c, kid.ID)}
		if got := shell(t, k.conn, "ip -4 addr show eth0"); !strings.Contains(got, kid.Address+"/30") {
			t.Fatalf("child's eth0:\n%s", got)
		}
		k.mustGet(t, "http://other.test/", "hello from "+testenv.LabHostC)
		b.mustGet(t, "http://other.test/", "hello from "+testenv.LabHostC)
		k.mustFail(t, "the parent's deny rule", "get", "http://denied.test/")
		k.mustFail(t, "the parent", "dial", open.Address+":8080")
	})

	t.Run("kill -9 and restart keep isolation and policy", func(t *testing.T) {
		s.remember()
		s.zeishd.Kill()
		s.start()
		a.conn = connect(t, c, strict.ID)
		a.mustGet(t, "http://allowed.test/", "hello from "+testenv.LabHostA)
		a.mustFail(t, "an address not allowed", "get", "http://"+testenv.LabHostC+"/")
		b.conn = connect(t, c, open.ID)
		b.mustFail(t, "a denied name", "get", "http://denied.test/")
		b.mustFail(t, "the API port", "dial", lab.NodeAddr+":7420")
	})

	t.Run("delete leaves nothing", func(t *testing.T) {
		list, err := c.ListSandboxes(ctx, zeish.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range list {
			if _, err := c.DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
				t.Fatal(err)
			}
		}
		if st, _, resp := s.raw(t, "PATCH", api.BasePath+"/public/sandboxes/"+strict.ID+"/network", s.key, `{"egress":"allow"}`); st != 409 || errorCode(resp) != "invalid_state" {
			t.Fatalf("policy on a destroyed sandbox: %d %s", st, resp)
		}
		if out, _ := testenv.Exec(lab.Node, "ip", "link"); strings.Contains(out, "zt-") {
			t.Fatalf("taps left after delete:\n%s", out)
		}
		if out, _ := testenv.Exec(lab.Node, "nft", "list", "table", "inet", "zeish"); strings.Contains(out, "g-zt-") {
			t.Fatalf("guest chains left after delete:\n%s", out)
		}
		s.stop()
		if out, _ := testenv.Exec(lab.Node, "nft", "list", "tables"); strings.Contains(out, "zeish") {
			t.Fatalf("table left after zeishd stopped with no sandboxes:\n%s", out)
		}
	})
}

// waitDial connects to addr from inside namespace ns, retrying briefly (a
// server just started in a guest).
func waitDial(t *testing.T, ns, addr string) {
	t.Helper()
	var err error
	for i := 0; i < 50; i++ {
		var conn net.Conn
		if conn, err = testenv.DialIn(ns, "tcp", addr); err == nil {
			conn.Close()
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("dial %s from %s: %v", addr, ns, err)
}
