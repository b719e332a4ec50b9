package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/network"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// labDomain is the ZEISH_PUBLIC_DOMAIN of TestNetworkLimits' zeishd.
const labDomain = "sbx.lab.test"

// TestNetworkLimits proves what networking adds on top of reach and
// isolation, on real guests in a NetLab: a sandbox's rate cap holds a
// download to the cap, bytes in and out show in usage (across a kill -9 of
// zeishd, at 0 for a fork, kept after delete), DNS under egress deny never
// leaves the node, the host form of a port URL answers, and `zeishctl
// network set` changes the policy.
func TestNetworkLimits(t *testing.T) {
	s, lab := startLabServer(t, "ZEISH_PUBLIC_DOMAIN="+labDomain)
	ctx := ctxFor(t, 20*time.Minute)
	c := s.client
	const capBytes = 1 << 20 // 1 MiB/s

	t.Run("bad rates change nothing", func(t *testing.T) {
		for _, body := range []string{
			`{"network":{"rate_bytes_per_second":-1}}`,
			`{"network":{"rate_bytes_per_second":100}}`,           // under the minimum
			`{"network":{"rate_bytes_per_second":1099511627776}}`, // over the node's default, its most
			`{"network":{"rate_packets_per_second":-5}}`,
			`{"network":{"enabled":false,"rate_bytes_per_second":65536}}`,
		} {
			if st, _, resp := s.raw(t, "POST", api.BasePath+"/public/sandboxes", s.key, body); st != 400 || errorCode(resp) != "invalid_argument" {
				t.Errorf("create %s: %d %s", body, st, resp)
			}
		}
		if list, _ := c.ListSandboxes(ctx, zeish.ListOptions{}); len(list) != 0 {
			t.Fatalf("a refused create left sandboxes: %+v", list)
		}
		if out, _ := testenv.Exec(lab.Node, "nft", "list", "table", "inet", "zeish"); strings.Contains(out, "g-zt-") {
			t.Fatalf("a refused create left a guest chain:\n%s", out)
		}
	})

	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "net-capped", MemoryMiB: 256,
		Network: &api.NetworkRequest{RateBytes: capBytes}}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("create: %+v %v", sb, err)
	}
	if n := sb.Network; n == nil || n.RateBytes != capBytes || n.RatePackets <= 0 {
		t.Fatalf("rates as shown: %+v (want %d bytes/s and the node's packet rate)", sb.Network, capBytes)
	}
	g := newNetGuest(t, s, sb)
	usageOf := func(id string) api.Usage { t.Helper(); return sandboxUsage(ctx, t, c, id) }
	before := usageOf(sb.ID)

	t.Run("a download is held to the cap", func(t *testing.T) {
		const size = 4 << 20
		ok, out := g.try(t, "fetch", fmt.Sprintf("http://%s/bytes/%d", testenv.LabHostA, size))
		if !ok {
			t.Fatalf("fetch: %s", out)
		}
		var n int64
		var secs float64
		if _, err := fmt.Sscanf(out, "%d %f", &n, &secs); err != nil || n != size {
			t.Fatalf("fetch said %q (%v), want %d bytes", out, err, size)
		}
		// The policer lets through at most rate·(t+1) + burst bytes in t
		// seconds (its bucket holds a second of the rate plus the burst):
		// a property of the cap, not of this machine's speed.
		r := network.Rates{Bytes: capBytes}
		least := float64(size-capBytes-r.BytesBurst()) / capBytes
		t.Logf("%d bytes in %.2f s: %.0f KiB/s under a cap of %d KiB/s", n, secs, float64(n)/secs/1024, capBytes/1024)
		if secs < least {
			t.Fatalf("%d bytes took %.2f s; a cap of %d bytes/s needs at least %.2f s", n, secs, capBytes, least)
		}
	})

	t.Run("bytes show in usage", func(t *testing.T) {
		u := usageOf(sb.ID)
		if u.NetInBytes < before.NetInBytes+4<<20 || u.NetOutBytes <= before.NetOutBytes {
			t.Fatalf("usage after a 4 MiB download: in %d out %d (before: in %d out %d)", u.NetInBytes, u.NetOutBytes, before.NetInBytes, before.NetOutBytes)
		}
		rep, _ := c.Usage(ctx, time.Time{}, time.Time{})
		if rep.Total.NetInBytes < u.NetInBytes {
			t.Fatalf("total in %d < the sandbox's %d", rep.Total.NetInBytes, u.NetInBytes)
		}
	})

	t.Run("a live rate change", func(t *testing.T) {
		zero := int64(0)
		got, err := c.SetNetwork(ctx, sb.ID, zeish.NetworkPolicyRequest{RateBytes: &zero})
		if err != nil || got.Network.RateBytes <= capBytes {
			t.Fatalf("back to the node's default: %+v %v", got.Network, err)
		}
		// Without the cap the same download is only logged: how fast it goes
		// is the machine's business.
		if ok, out := g.try(t, "fetch", fmt.Sprintf("http://%s/bytes/%d", testenv.LabHostA, 4<<20)); ok {
			t.Logf("uncapped (node default %d bytes/s): %s", got.Network.RateBytes, out)
		}
		big := int64(1 << 40)
		if _, err := c.SetNetwork(ctx, sb.ID, zeish.NetworkPolicyRequest{RateBytes: &big}); err == nil {
			t.Fatal("a rate above the node's was taken")
		}
		if now, _ := c.GetSandbox(ctx, sb.ID); now.Network.RateBytes != got.Network.RateBytes {
			t.Fatalf("a refused change changed the rate: %+v", got.Network)
		}
	})

	t.Run("host form of a port URL", func(t *testing.T) {
		run(t, g.conn, "sh", "-c", "/root/nettool serve 8080 </dev/null >/dev/null 2>&1 &")
		waitDial(t, lab.Node, sb.Address+":8080")
		p, err := c.SetPort(ctx, sb.ID, 8080, false)
		want := "8080-" + strings.Replace(sb.ID, "_", "-", 1) + "." + labDomain
		if err != nil || p.Host != want {
			t.Fatalf("port info: %+v %v, want host %s", p, err, want)
		}
		_, tok, err := g.conn.PortURL(ctx, 8080)
		if err != nil {
			t.Fatal(err)
		}
		get := func(host, token string) (int, string) {
			t.Helper()
			req, _ := http.NewRequestWithContext(ctx, "GET", strings.TrimSuffix(s.url(), api.BasePath)+"/by/host?x=1", nil)
			req.Host = host
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if st, body := get(want, tok); st != 200 || !strings.Contains(body, `hello from the guest /by/host?x=1 auth=""`) {
			t.Fatalf("host form with token: %d %q", st, body)
		}
		if st, body := get(strings.ToUpper(want)+":443", tok); st != 200 {
			t.Fatalf("host form in capitals, with a port: %d %q", st, body)
		}
		if st, body := get(want, ""); st != 401 {
			t.Fatalf("host form without token: %d %q", st, body)
		}
		if st, body := get(strings.Replace(want, "8080-", "70000-", 1), tok); st != 400 || errorCode([]byte(body)) != "invalid_argument" {
			t.Fatalf("host form, port out of range: %d %q", st, body)
		}
		if st, body := get("8080-sbx-00000000000000000000."+labDomain, tok); st != 401 && st != 404 {
			t.Fatalf("host form, no such sandbox: %d %q", st, body)
		}
		if _, err := c.SetPort(ctx, sb.ID, 8080, true); err != nil {
			t.Fatal(err)
		}
		if st, body := get(want, ""); st != 200 || !strings.Contains(body, "/by/host") {
			t.Fatalf("public port, host form, no token: %d %q", st, body)
		}
	})

	t.Run("no DNS leaves under egress deny", func(t *testing.T) {
		// Control: under egress allow a query reaches the lab's resolver,
		// so the check below can see one that leaks.
		g.try(t, "lookup", "control-1.other.test")
		if !containsName(lab.Queries(), "control-1.other.test") {
			t.Fatalf("the lab's resolver never saw the control query: %v", lab.Queries())
		}
		out := zeishctl(t, s, "network", "set", sb.ID, "--egress", "deny", "--clear-allow", "-o", "json")
		var shown sandbox.Sandbox
		if err := json.Unmarshal([]byte(out), &shown); err != nil || shown.Network == nil || shown.Network.Egress != sandbox.EgressDeny {
			t.Fatalf("zeishctl network set: %v\n%s", err, out)
		}
		if got, _ := c.GetSandbox(ctx, sb.ID); got.Network.Egress != sandbox.EgressDeny || len(got.Network.Allow) != 0 {
			t.Fatalf("after zeishctl network set: %+v", got.Network)
		}
		if out := zeishctl(t, s, "network", "get", sb.ID); !strings.Contains(out, "deny") || !strings.Contains(out, "bytes/s") {
			t.Fatalf("zeishctl network get:\n%s", out)
		}
		for _, name := range []string{"secret-1.other.test", "c2VjcmV0.exfil.example", "allowed.test"} {
			if ok, out := g.try(t, "lookup", name); ok {
				t.Fatalf("lookup %s under egress deny answered: %s", name, out)
			}
		}
		// Straight at the lab's resolver too: a guest's port 53 goes to the
		// forwarder whatever the address.
		if ok, out := g.try(t, "lookup", "secret-2.other.test", lab.DNS); ok {
			t.Fatalf("lookup at the lab's resolver under egress deny answered: %s", out)
		}
		g.mustFail(t, "a lab host under deny", "get", "http://"+testenv.LabHostC+"/")
		for _, q := range lab.Queries() {
			if strings.Contains(q, "secret") || strings.Contains(q, "exfil") || q == "allowed.test" {
				t.Fatalf("the lab's resolver saw %q under egress deny: %v", q, lab.Queries())
			}
		}
		// An allowed name is asked upstream again.
		zeishctl(t, s, "network", "set", sb.ID, "--allow", "allowed.test")
		g.mustGet(t, "http://allowed.test/", "hello from "+testenv.LabHostA)
		if !containsName(lab.Queries(), "allowed.test") {
			t.Fatalf("an allowed name never reached the resolver: %v", lab.Queries())
		}
		zeishctl(t, s, "network", "set", sb.ID, "--egress", "allow", "--clear-allow")
	})

	t.Run("a fork's counters start at 0; kill -9 keeps them; delete keeps the total", func(t *testing.T) {
		res, err := c.CloneSandbox(ctx, sb.ID, api.CloneRequest{Name: "net-capped-child"}, zeish.Wait())
		if err != nil || len(res.Sandboxes) != 1 {
			t.Fatalf("clone: %+v %v", res, err)
		}
		kid := res.Sandboxes[0]
		if cur, _ := c.GetSandbox(ctx, sb.ID); kid.Network == nil || kid.Network.RateBytes != cur.Network.RateBytes || kid.Network.RatePackets != cur.Network.RatePackets {
			t.Fatalf("child's rates %+v, parent's %+v", kid.Network, cur.Network)
		}
		parent, child := usageOf(sb.ID), usageOf(kid.ID)
		if parent.NetInBytes < 4<<20 || child.NetInBytes >= 1<<20 {
			t.Fatalf("after a fork: parent in %d, child in %d (want the child near 0)", parent.NetInBytes, child.NetInBytes)
		}
		s.remember()
		s.zeishd.Kill()
		s.start()
		if after := usageOf(sb.ID); after.NetInBytes < parent.NetInBytes || after.NetOutBytes < parent.NetOutBytes {
			t.Fatalf("a restart lost bytes: in %d→%d, out %d→%d", parent.NetInBytes, after.NetInBytes, parent.NetOutBytes, after.NetOutBytes)
		}
		last := usageOf(sb.ID)
		for _, id := range []string{kid.ID, sb.ID} {
			if _, err := c.DeleteSandbox(ctx, id, zeish.Wait()); err != nil {
				t.Fatal(err)
			}
		}
		if gone := usageOf(sb.ID); gone.NetInBytes < last.NetInBytes || gone.NetOutBytes < last.NetOutBytes {
			t.Fatalf("delete lost bytes: in %d→%d, out %d→%d", last.NetInBytes, gone.NetInBytes, last.NetOutBytes, gone.NetOutBytes)
		}
		if out, _ := testenv.Exec(lab.Node, "nft", "list", "table", "inet", "zeish"); strings.Contains(out, "g-zt-") || strings.Contains(out, "l-zt-") {
			t.Fatalf("guest chains left after delete:\n%s", out)
		}
	})
}

func containsName(names []string, want string) bool {
	for _, n := range names {
		if n == want {
			return true
		}
	}
	return false
}

// zeishctl runs the CLI against s and returns its output; it must succeed.
func zeishctl(t *testing.T, s *server, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "zeishctl"), args...)
	cmd.Env = append(os.Environ(), "ZEISH_API_URL="+s.url(), "ZEISH_API_KEY="+s.key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("zeishctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
