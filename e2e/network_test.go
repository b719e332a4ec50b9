package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testenv/ociimg"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// labListen is where zeishd listens inside the lab's node namespace: every
// address, so that a guest failing to reach the API port proves the
// firewall, not a loopback-only listener.
const labListen = "0.0.0.0:7420"

// startLabServer runs zeishd inside a fresh NetLab: its only way out is the
// lab's internet, and the test reaches its API through a loopback relay.
func startLabServer(t *testing.T, extraEnv ...string) (*server, *testenv.NetLab) {
	t.Helper()
	lab := testenv.NewNetLab(t)
	relay, err := lab.Relay(lab.Node, "127.0.0.1:7420")
	if err != nil {
		t.Fatal(err)
	}
	s := startServerWith(t, func(z *testenv.Zeishd) { z.Netns, z.Listen, z.Addr = lab.Node, labListen, relay },
		append([]string{"ZEISH_UPLINK=" + lab.Uplink, "ZEISH_DNS_UPSTREAM=" + lab.DNS, "ZEISH_NET_CIDR=10.213.0.0/24",
			"ZEISH_NET_ALLOW_RANGES=" + testenv.LabRange}, extraEnv...)...)
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

// mustGet needs url to answer want. nettool gives up after 4 s; on a host
// loaded enough that a TCG guest misses that, it is asked up to three times.
func (g *netGuest) mustGet(t *testing.T, url, want string) {
	t.Helper()
	var ok bool
	var out string
	for range 3 {
		if ok, out = g.try(t, "get", url); ok && strings.Contains(out, want) {
			return
		}
	}
	t.Fatalf("%s: get %s: ok=%v %q, want %q", g.sb.Name, url, ok, out, want)
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
		if out, _ := testenv.Exec(lab.Node, "nft", "list", "table", "inet", "zeish"); strings.Contains(out, "g-zt-") {
			t.Fatalf("a refused create left a guest chain:\n%s", out)
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

	t.Run("a neighbour's DNS flood", func(t *testing.T) {
		// b floods the forwarder with random names for 6 s; a's lookups
		// meanwhile are all answered (their latency is reported, idle and
		// during the flood: docs/network.md).
		_, idle := a.try(t, "dnslatency", "allowed.test", "20")
		run(t, b.conn, "sh", "-c", "/root/nettool dnsflood 6 > /root/flood.out 2>&1 &")
		time.Sleep(time.Second)
		ok, during := a.try(t, "dnslatency", "allowed.test", "20")
		var flood string
		for i := 0; i < 40 && !strings.Contains(flood, "sent"); i++ {
			time.Sleep(500 * time.Millisecond)
			flood = strings.TrimSpace(shell(t, b.conn, "cat /root/flood.out"))
		}
		t.Logf("a's lookups idle: %s; during b's flood: %s; b's flood: %s", idle, during, flood)
		if !ok || !strings.HasPrefix(during, "ok 20 ") {
			t.Fatalf("a's lookups during b's flood: %q", during)
		}
		if !strings.HasPrefix(flood, "sent ") {
			t.Fatalf("b's flood: %q", flood)
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

	t.Run("ports", func(t *testing.T) {
		portsThroughDataPlane(t, s, a, b)
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

	t.Run("stop, start and restore keep the address", func(t *testing.T) {
		snap, err := c.CreateSnapshot(ctx, open.ID, api.CreateSnapshotRequest{Name: "net-snap"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.StopSandbox(ctx, open.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
		sb, err := c.StartSandbox(ctx, open.ID, zeish.Wait())
		if err != nil || sb.State != sandbox.StateRunning || sb.Address != open.Address {
			t.Fatalf("start: %s %s %v (address was %s)", sb.State, sb.Address, err, open.Address)
		}
		b.conn = connect(t, c, open.ID)
		b.mustGet(t, "http://other.test/", "hello from "+testenv.LabHostC)
		res, err := c.RestoreSnapshot(ctx, snap.ID, zeish.Wait())
		if err != nil || res.Sandbox.Address != open.Address || res.Sandbox.State != sandbox.StateRunning {
			t.Fatalf("restore: %+v %v", res.Sandbox, err)
		}
		b.conn = connect(t, c, open.ID)
		b.mustGet(t, "http://other.test/", "hello from "+testenv.LabHostC)
		b.mustFail(t, "a denied name after restore", "get", "http://denied.test/")
	})

	t.Run("a warm create takes a ready VM's link and its own policy", func(t *testing.T) {
		readyVMNetwork(t, s)
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
		// Only the links the node keeps ready are left.
		if out, _ := testenv.Exec(lab.Node, "ip", "-4", "addr"); strings.Count(out, ": zt-") > 4 {
			t.Fatalf("taps left after delete:\n%s", out)
		}
		if out, _ := testenv.Exec(lab.Node, "nft", "list", "table", "inet", "zeish"); strings.Contains(out, "g-zt-") {
			t.Fatalf("guest chains left after delete:\n%s", out)
		}
		s.stop()
		if out, _ := testenv.Exec(lab.Node, "nft", "list", "tables"); strings.Contains(out, "zeish") {
			t.Fatalf("table left after zeishd stopped with no sandboxes:\n%s", out)
		}
		if out, _ := testenv.Exec(lab.Node, "ip", "link"); strings.Contains(out, "zt-") {
			t.Fatalf("taps left after zeishd stopped with no sandboxes:\n%s", out)
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

// portsThroughDataPlane proves a guest's server (nettool serve 8080 in a)
// answers through the data plane: HTTP with the token (which the guest never
// sees), WebSocket, raw TCP, a public port, `zeishctl ports forward`, and
// the refusals: no token, another sandbox's token, another account, a bad port.
func portsThroughDataPlane(t *testing.T, s *server, a, b *netGuest) {
	ctx := ctxFor(t, 5*time.Minute)
	url, tok, err := a.conn.PortURL(ctx, 8080)
	if err != nil {
		t.Fatal(err)
	}
	get := func(u, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if st, body := get(url+"hello/there?x=1", tok); st != 200 || !strings.Contains(body, `hello from the guest /hello/there?x=1 auth=""`) {
		t.Fatalf("proxy with token: %d %q", st, body)
	}
	if st, body := get(url+"hello", ""); st != 401 {
		t.Fatalf("proxy without token: %d %q", st, body)
	}
	_, tokB, _ := b.conn.PortURL(ctx, 8080)
	if st, body := get(url+"hello", tokB); st != 401 {
		t.Fatalf("proxy with another sandbox's token: %d %q", st, body)
	}
	if st, body := get(strings.Replace(url, "/ports/8080/", "/ports/70000/", 1), tok); st != 400 || errorCode([]byte(body)) != "invalid_argument" {
		t.Fatalf("port out of range: %d %q", st, body)
	}

	// WebSocket through the proxy.
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
	if err != nil {
		t.Fatalf("websocket through the proxy: %v", err)
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := ws.Read(ctx); err != nil || string(msg) != "echo: hi" {
		t.Fatalf("websocket echo: %q %v", msg, err)
	}
	ws.Close(websocket.StatusNormalClosure, "")

	// Raw TCP.
	raw, err := a.conn.DialPort(ctx, 8080)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(raw, "GET /raw HTTP/1.0\r\n\r\n")
	got, _ := io.ReadAll(raw)
	raw.Close()
	if !strings.Contains(string(got), "hello from the guest /raw") {
		t.Fatalf("raw tcp: %q", got)
	}

	// Public, then private again.
	if p, err := s.client.SetPort(ctx, a.sb.ID, 8080, true); err != nil || !p.Public || p.URL != url {
		t.Fatalf("open port: %+v %v (url %s)", p, err, url)
	}
	if st, body := get(url+"pub", ""); st != 200 || !strings.Contains(body, "/pub") {
		t.Fatalf("public port without token: %d %q", st, body)
	}
	// The list: 8080 listens (nettool) and is public; 9999 is public with
	// nothing on it; sandboxd's own port is not TCP, so it is not listed.
	if _, err := s.client.SetPort(ctx, a.sb.ID, 9999, true); err != nil {
		t.Fatal(err)
	}
	ports, err := s.client.Ports(ctx, a.sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	byPort := map[int]zeish.ListedPort{}
	for _, p := range ports {
		byPort[p.Port.Port] = p
	}
	if p := byPort[8080]; !p.Listening || !p.Public || p.URL != url {
		t.Fatalf("ports: 8080 = %+v, want listening and public at %s (all: %+v)", p, url, ports)
	}
	if p, ok := byPort[9999]; !ok || p.Listening || !p.Public {
		t.Fatalf("ports: 9999 = %+v (listed %v), want public and not listening", p, ok)
	}
	if _, err := s.client.SetPort(ctx, a.sb.ID, 9999, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.SetPort(ctx, a.sb.ID, 8080, false); err != nil {
		t.Fatal(err)
	}
	if st, _ := get(url+"pub", ""); st != 401 {
		t.Fatalf("closed port without token: %d", st)
	}
	if _, err := s.client.SetPort(ctx, a.sb.ID, 0, true); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("port 0: %v", err)
	}

	// Another account sees no such sandbox.
	acct, err := s.client.CreateAccount(ctx, "net-other")
	if err != nil {
		t.Fatal(err)
	}
	key, err := s.client.CreateAPIKey(ctx, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	other := s.clientFor(t, key.Key)
	if _, err := other.SetPort(ctx, a.sb.ID, 8080, true); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("other account opens a port: %v", err)
	}
	if _, err := other.Ports(ctx, a.sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("another account lists the ports: %v", err)
	}
	if _, err := other.SetNetwork(ctx, a.sb.ID, zeish.NetworkPolicyRequest{Egress: sandbox.EgressAllow}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("other account changes the policy: %v", err)
	}

	// zeishctl ports forward.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	local := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(filepath.Join(bin, "zeishctl"), "ports", "forward", a.sb.ID, fmt.Sprintf("8080:%d", local))
	cmd.Env = append(os.Environ(), "ZEISH_API_URL="+s.url(), "ZEISH_API_KEY="+s.key)
	var cliOut testenv.LogBuffer
	cmd.Stdout, cmd.Stderr = &cliOut, &cliOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var st int
	var body string
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", local)); err == nil {
			c.Close()
			st, body = get(fmt.Sprintf("http://127.0.0.1:%d/cli", local), "")
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st != 200 || !strings.Contains(body, "hello from the guest /cli") {
		t.Fatalf("ports forward: %d %q; zeishctl said %q", st, body, cliOut.String())
	}
}

// readyVMNetwork builds a warm template in a networked zeishd, waits for
// its ready VM (launched with a link of its own, no firewall chain yet)
// and creates a sandbox on it with egress deny: the sandbox reaches the
// name it allows and nothing else, so its address and policy are the
// link's. A sandbox without a card gets a ready VM without one (after the
// first such create made the template's card-less image). Deleting the
// template ends the ready VMs and frees their links.
func readyVMNetwork(t *testing.T, s *server) {
	c, ctx := s.client, ctxFor(t, 10*time.Minute)
	l, _ := ociimg.Standard(t).Layers()
	img := ociimg.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, append(l, ociimg.Layer(t, ociimg.Entry{Name: "salt", Body: sandbox.NewID("run_")}))...)
	tpl, err := c.BuildTemplateFrom(ctx, zeish.BuildTemplateRequest{Name: "net-warm", DiskMiB: 256,
		StartCmd: []string{"/bin/sh", "-c", "while true; do sleep 1; done"}}, "docker-archive:"+ociimg.WriteDockerArchive(t, img, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if tpl, err = c.WaitTemplate(ctx, tpl.ID, nil); err != nil || tpl.Warm == nil {
		t.Fatalf("warm template: %+v %v", tpl, err)
	}
	s.waitReadyVM(t)
	hits := s.metric(t, "zeish_node_warm_creates_total", `ready="hit"`)
	w := tpl.Warm
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "net-ready", Template: "net-warm", VCPUs: w.VCPUs, MemoryMiB: w.MemoryMiB, DiskMiB: w.DiskMiB,
		Network: &api.NetworkRequest{Egress: sandbox.EgressDeny, Allow: []string{"allowed.test"}}}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning || sb.Address == "" {
		t.Fatalf("create on a ready VM: %+v %v", sb, err)
	}
	if got := s.metric(t, "zeish_node_warm_creates_total", `ready="hit"`); got != hits+1 {
		t.Fatalf("the create did not adopt the ready VM (hits %v → %v)", hits, got)
	}
	conn := connect(t, c, sb.ID)
	f, err := os.Open(testenv.GoBuildStatic(t, "./e2e/nettool"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := conn.WriteFile(ctx, "/tmp/nettool", f, 0o755); err != nil {
		t.Fatal(err)
	}
	g := &netGuest{sb: sb, conn: conn}
	get := func(url string) (bool, string) {
		out, errOut, res := run(t, conn, "/tmp/nettool", "get", url)
		return res.ExitCode == 0, out + errOut
	}
	var ok bool
	var out string
	for range 3 {
		if ok, out = get("http://allowed.test/"); ok && strings.Contains(out, "hello from "+testenv.LabHostA) {
			break
		}
	}
	if !ok {
		t.Fatalf("%s on a ready VM's link: get allowed.test: %q", g.sb.Name, out)
	}
	if ok, out := get("http://" + testenv.LabHostC + "/"); ok {
		t.Fatalf("an address its policy does not allow answered: %q", out)
	}
	if _, err := c.DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}

	// Without a card: the first such create boots cold (the warm image has a
	// card); the node then makes the template's card-less image and a ready
	// VM from it, which the next such create takes: no eth0, and it execs.
	off := false
	noCard := func(name string) zeish.Sandbox {
		t.Helper()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: name, Template: "net-warm", VCPUs: w.VCPUs, MemoryMiB: w.MemoryMiB, DiskMiB: w.DiskMiB,
			Network: &api.NetworkRequest{Enabled: &off}}, zeish.Wait())
		if err != nil || sb.State != sandbox.StateRunning || sb.Address != "" {
			t.Fatalf("create without a card: %+v %v", sb, err)
		}
		return sb
	}
	cold := noCard("net-off-cold")
	if !waitFor(5*time.Minute, func() bool { return s.metric(t, "zeish_node_ready_vms", "") >= 2 }) {
		t.Fatal("no card-less ready VM beside the one with a card")
	}
	hits = s.metric(t, "zeish_node_warm_creates_total", `ready="hit"`)
	hit := noCard("net-off-ready")
	if got := s.metric(t, "zeish_node_warm_creates_total", `ready="hit"`); got != hits+1 {
		t.Fatalf("the card-less create did not adopt a ready VM (hits %v → %v)", hits, got)
	}
	out, errOut, res := run(t, connect(t, c, hit.ID), "/bin/sh", "-c", "ls /sys/class/net")
	if res.ExitCode != 0 || strings.Contains(out, "eth0") || !strings.Contains(out, "lo") {
		t.Fatalf("interfaces of a card-less sandbox on a ready VM: %q %q %d", out, errOut, res.ExitCode)
	}
	for _, id := range []string{cold.ID, hit.ID} {
		if _, err := c.DeleteSandbox(ctx, id, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.DeleteTemplate(ctx, tpl.ID); err != nil {
		t.Fatal(err)
	}
	if !waitFor(time.Minute, func() bool { return s.metric(t, "zeish_node_ready_vms", "") == 0 }) {
		t.Fatal("the deleted template's ready VMs still run")
	}
}
