package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/node/lazyram"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/postgres"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// clusterSlots is every account's running-slot quota in the cluster test.
const clusterSlots = 6

// lab is one control plane and its node agents on one PostgreSQL database.
type lab struct {
	t       *testing.T
	db      string
	control *testenv.Zeishd // the replica the test calls
	// controls are the control-plane replicas.
	controls []*testenv.Zeishd
	nodes    map[string]*testenv.Zeishd
	client   *zeish.Client
	key      string
	// isolate runs every node agent added after it is set in a network
	// namespace of its own (testenv.NodeNetns): only lo, and the host's
	// loopback services its settings name (the control plane, the image
	// store) forwarded in; netns holds them by node id.
	isolate bool
	netns   map[string]*testenv.NodeNetns
}

func tempDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// startCluster runs control-plane replicas (ZEISH_ROLE=control) on a
// fresh database, sharing the first one's keys. Node agents are added with
// addNode. Cleanup deletes every sandbox through a live replica, stops
// everything and fails on VM processes or RAM files left behind. env are
// more settings of the replicas.
func startCluster(t *testing.T, lostAfter time.Duration, replicas int, env ...string) *lab {
	t.Helper()
	testenv.RequireQEMU(t)
	buildBinaries(t)
	l := &lab{t: t, db: postgresServer(t).NewDatabase(t), nodes: map[string]*testenv.Zeishd{}}
	t.Cleanup(l.cleanup)
	for i := range replicas {
		z := &testenv.Zeishd{Bin: filepath.Join(bin, "zeishd"), DataDir: tempDir(t, "zeish-e2e-control-"),
			Env: []string{"ZEISH_ROLE=control", "ZEISH_DATABASE_URL=" + l.db, "ZEISH_CLUSTER_ALLOW_HTTP=on",
				"ZEISH_NODE_LOST_AFTER=" + lostAfter.String(), "ZEISH_LOG_LEVEL=debug",
				"ZEISH_PUBLIC_DOMAIN=" + clusterDomain, "ZEISH_E2B_DOMAIN=" + clusterE2BDomain,
				fmt.Sprintf("ZEISH_PLAN_RUNNING_SLOTS=%d", clusterSlots)}}
		z.Env = append(z.Env, env...)
		if i > 0 {
			// Replicas share the keys that seal secrets and sign tokens.
			for _, f := range []string{"secrets.key", "token.key"} {
				b, err := os.ReadFile(filepath.Join(l.controls[0].DataDir, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(z.DataDir, f), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		l.controls = append(l.controls, z)
		if err := z.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if l.key, err = l.controls[0].AdminKey(); err != nil {
		t.Fatal(err)
	}
	l.use(0)
	return l
}

// use sends the test's calls to replica i.
func (l *lab) use(i int) {
	l.control = l.controls[i]
	l.client = zeish.NewClient("http://"+l.control.Addr+api.BasePath, l.key, zeish.WithHTTPClient(&http.Client{Transport: newValidatingTransport(l.t)}))
}

// addNode starts a node agent with a memory budget, joined with a join
// token made for it as an operator would, and waits until the control
// plane lists it live.
func (l *lab) addNode(id string, budgetMiB int) *testenv.Zeishd { return l.addNodeEnv(id, budgetMiB) }

// addNodeEnv is addNode with more settings.
func (l *lab) addNodeEnv(id string, budgetMiB int, env ...string) *testenv.Zeishd {
	l.t.Helper()
	z := l.nodeAgent(id, tempDir(l.t, "zeish-e2e-"+id+"-"), budgetMiB, env...)
	l.nodes[id] = z
	if err := z.Start(context.Background()); err != nil {
		l.t.Fatal(err)
	}
	if l.isolate {
		own, _ := os.Readlink("/proc/self/ns/net")
		if its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", z.PID())); err != nil || its == own {
			l.t.Fatalf("node %s runs in the test's network namespace (%s %v), not its own", id, its, err)
		}
	}
	l.waitNode(id, true)
	return z
}

// nodeAgent is node id's zeishd on dataDir, joined with a join token made
// for it, not started yet: every node agent of the cluster tests is made
// here.
func (l *lab) nodeAgent(id, dataDir string, budgetMiB int, env ...string) *testenv.Zeishd {
	t := l.t
	t.Helper()
	tpl := testenv.BaseTemplate(t)
	join, err := testenv.JoinToken(context.Background(), filepath.Join(bin, "zeishd"), l.db, id)
	if err != nil {
		t.Fatal(err)
	}
	z := &testenv.Zeishd{Bin: filepath.Join(bin, "zeishd"), DataDir: dataDir,
		Env: []string{"ZEISH_ROLE=node", "ZEISH_NODE_ID=" + id, "ZEISH_CONTROL_URL=" + l.controlURLs(),
			"ZEISH_JOIN_TOKEN=" + join, "ZEISH_CLUSTER_ALLOW_HTTP=on", "ZEISH_REGION=lab", "ZEISH_PUBLIC_DOMAIN=" + clusterDomain,
			"ZEISH_NODE_LABELS=disk=ssd,rack=" + id, fmt.Sprintf("ZEISH_MEMORY_BUDGET_MIB=%d", budgetMiB),
			"ZEISH_SANDBOXD=" + testenv.SandboxdBinary(t), "ZEISH_TEMPLATE_CACHE=" + filepath.Dir(tpl.Dir), "ZEISH_LOG_LEVEL=debug"}}
	z.Env = append(z.Env, env...)
	if l.isolate {
		l.isolateNode(id, z)
	}
	return z
}

// loopbackAddrs are the host:port addresses on the host's loopback that
// settings name (the control plane's URLs, an image store's endpoint).
var loopbackAddrs = regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)

// isolateNode moves node agent z into a network namespace of its own: its
// settings' loopback services are forwarded in at the same addresses, its
// own listener is relayed out (the address the control plane and the test
// call), and it runs without sandbox networking, as in the host.
func (l *lab) isolateNode(id string, z *testenv.Zeishd) {
	t := l.t
	t.Helper()
	seen := map[string]bool{}
	var addrs []string
	for _, a := range loopbackAddrs.FindAllString(strings.Join(z.Env, " "), -1) {
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	ns := testenv.NewNodeNetns(t, addrs...)
	if links, err := ns.Links(); err != nil || strings.Count(strings.TrimSpace(links), "\n") != 0 || !strings.Contains(links, ": lo:") {
		t.Fatalf("node %s's namespace %s should have lo alone: %v\n%s", id, ns.Name, err, links)
	}
	const listen = "127.0.0.1:7421"
	relay, err := ns.Relay(listen)
	if err != nil {
		t.Fatal(err)
	}
	z.Netns, z.Listen, z.Addr = ns.Name, listen, relay
	z.Env = append(z.Env, "ZEISH_NET=off", "ZEISH_NODE_URL=http://"+relay)
	if l.netns == nil {
		l.netns = map[string]*testenv.NodeNetns{}
	}
	l.netns[id] = ns
}

// only undrains node id and drains every other ("": undrains them all),
// so that placement picks id.
func (l *lab) only(id string) {
	l.t.Helper()
	for n := range l.nodes {
		path := "/admin/nodes/" + n + "/drain"
		if n == id || id == "" {
			path = "/admin/nodes/" + n + "/undrain"
		}
		if st := l.do("POST", path, nil); st != http.StatusOK {
			l.t.Fatalf("%s: %d", path, st)
		}
	}
}

// controlURLs lists every replica, for the node agents.
func (l *lab) controlURLs() string {
	var urls []string
	for _, z := range l.controls {
		urls = append(urls, "http://"+z.Addr)
	}
	return strings.Join(urls, ",")
}

// waitNode waits until the control plane lists node id live and healthy
// (or not live).
func (l *lab) waitNode(id string, live bool) api.Node {
	l.t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		for _, n := range l.listNodes() {
			if n.ID == id && n.Live == live && (!live || n.Healthy) {
				return n
			}
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("node %s never became live=%v: %+v", id, live, l.listNodes())
		}
	}
}

func (l *lab) listNodes() []api.Node {
	l.t.Helper()
	var out api.NodeList
	if st := l.do("GET", "/admin/nodes", &out); st != http.StatusOK {
		l.t.Fatalf("list nodes: %d", st)
	}
	return out.Nodes
}

// do calls the control plane's API with the admin key.
func (l *lab) do(method, path string, out any) int {
	l.t.Helper()
	s := &server{t: l.t, addr: l.control.Addr}
	return s.do(l.t, method, api.BasePath+path, l.key, nil, out)
}

// mostFree is the node placement must pick now: most free memory, ties by id.
func (l *lab) mostFree() string {
	best := api.Node{FreeMiB: -2}
	for _, n := range l.listNodes() {
		if n.Live && n.Healthy && !n.Draining && n.FreeMiB > best.FreeMiB {
			best = n
		}
	}
	return best.ID
}

func (l *lab) cleanup() {
	t := l.t
	for i, z := range l.controls {
		if z.Running() && (l.control == nil || !l.control.Running()) {
			l.use(i)
		}
	}
	if l.control != nil && l.control.Running() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		if list, err := l.client.ListSandboxes(ctx, zeish.ListOptions{}); err == nil {
			for _, sb := range list {
				if _, err := l.client.DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
					t.Errorf("cleanup: delete %s: %v", sb.ID, err)
				}
			}
		}
		cancel()
	}

	for id, z := range l.nodes {
		if t.Failed() {
			t.Logf("node %s log:\n%s", id, z.Log.Tail(6000))
		}
		z.Stop()
		if pids := procscan.Under(z.DataDir); len(pids) > 0 {
			t.Errorf("cleanup: VM processes left behind on %s: %v", id, pids)
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if mnt := filepath.Join(z.DataDir, "lazyram", "mnt"); lazyram.Mounted(mnt) {
			t.Errorf("cleanup: lazy RAM mount left on %s: %s", id, mnt)
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
		for _, f := range testenv.ImageRAMFiles(z.DataDir) {
			t.Errorf("cleanup: image RAM file left on %s: %s", id, f)
			os.Remove(f)
		}
		os.RemoveAll(z.DataDir)
	}
	for i, z := range l.controls {
		if t.Failed() {
			t.Logf("control plane %d log:\n%s", i, z.Log.Tail(6000))
		}
		z.Stop()
		os.RemoveAll(z.DataDir)
	}
}

// execOn runs script in sandbox id through the data plane, which must be
// served by node (its URL), and returns its output.
func (l *lab) execOn(ctx context.Context, id, node, script string) string {
	l.t.Helper()
	acc, err := l.client.Access(ctx, id, 0)
	if err != nil {
		l.t.Fatalf("access %s: %v", id, err)
	}
	if want := "http://" + l.nodes[node].Addr + api.DataPath + "/sandboxes/"; !strings.HasPrefix(acc.URL, want) {
		l.t.Fatalf("access URL of %s is %s, want it on node %s (%s…)", id, acc.URL, node, want)
	}
	conn, err := l.client.Connect(ctx, id)
	if err != nil {
		l.t.Fatal(err)
	}
	return shell(l.t, conn, script)
}

// TestCluster runs one control plane and two node agents on PostgreSQL,
// with real VMs: creates are placed on the node with the most free memory,
// a fork lands on its parent's node and gets node_full there when it has
// no room while creates go elsewhere, the data plane is served by the
// sandbox's node itself, and a node killed with -9 has its sandboxes
// error node_lost (the other node's keep working) until it comes back and
// they run again. Two control-plane replicas share the database: one
// killed with -9, the other serves everything and the nodes heartbeat to it.
func TestCluster(t *testing.T) {
	ctx := ctxFor(t, 20*time.Minute)
	l := startCluster(t, 4*time.Second, 2)
	l.addNode("node-a", 1280)
	l.addNode("node-b", 1152)
	for id := range l.nodes {
		l.nodeHoldsNoDatabase(id)
	}
	var health api.Health
	if st := (&server{t: t, addr: l.control.Addr}).do(t, "GET", "/healthz", "", nil, &health); st != http.StatusOK || health.Accel != "none" {
		t.Fatalf("control plane health: %d %+v", st, health)
	}

	// Every process serves /metrics: the control plane each node's state
	// from the registry, a node agent its own capacity.
	if m := scrape(t, l.control.Addr); !strings.Contains(m, `zeish_node_up{node="node-a",region="lab"} 1`) ||
		!strings.Contains(m, `zeish_node_memory_budget_mib{node="node-b"} 1152`) || !strings.Contains(m, `zeish_sandboxes{state="running"}`) ||
		!strings.Contains(m, `zeish_node_image_disk_mib{node="node-a"} 0`) {
		t.Fatalf("control plane /metrics:\n%s", m)
	}
	if m := scrape(t, l.nodes["node-a"].Addr); !strings.Contains(m, `zeish_node_memory_budget_mib{node="node-a"} 1280`) {
		t.Fatalf("node agent /metrics:\n%s", m)
	}

	// The control plane refuses bad requests as a single zeishd does.
	checkBadRequests(t, &server{t: t, addr: l.control.Addr, key: l.key})
	l.burst(ctx)

	// Placement spreads creates by free memory: a (1280 free) then b (1152 > 1024).
	var made []zeish.Sandbox
	for _, name := range []string{"one", "two"} {
		want := l.mostFree()
		sb, err := l.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: name, MemoryMiB: 256, Region: "lab",
			Env: map[string]string{"GREETING": "hello"}}, zeish.Wait())
		if err != nil {
			t.Fatal(err)
		}
		if sb.Host != want {
			t.Fatalf("%s placed on %s, want %s (most free memory): %+v", name, sb.Host, want, l.listNodes())
		}
		made = append(made, sb)
	}
	one, two := made[0], made[1]
	if one.Host == two.Host {
		t.Fatalf("both creates on %s", one.Host)
	}
	if _, err := l.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{MemoryMiB: 256, Region: "mars"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("create in a region no node serves: %v", err)
	}
	// Placement honours the accel and node labels asked for.
	for _, c := range []struct {
		req  zeish.CreateSandboxRequest
		want *errdefs.Error
	}{
		{zeish.CreateSandboxRequest{Accel: "gpu"}, errdefs.ErrInvalidAccel},
		{zeish.CreateSandboxRequest{Accel: "kvm"}, errdefs.ErrNodeFull}, // both nodes run tcg
		{zeish.CreateSandboxRequest{NodeLabels: map[string]string{"rack": "nowhere"}}, errdefs.ErrNodeFull},
		{zeish.CreateSandboxRequest{NodeLabels: map[string]string{"disk": "ssd", "rack": "node-a", "gpu": "a"}}, errdefs.ErrNodeFull},
	} {
		if _, err := l.client.CreateSandbox(ctx, c.req); !errors.Is(err, c.want) {
			t.Fatalf("create %+v: %v, want %s", c.req, err, c.want.Code)
		}
	}

	// The data plane is the node's own.
	if out := l.execOn(ctx, one.ID, one.Host, "echo one > /root/f; uname -n"); out != "one" {
		t.Fatalf("exec on %s: %q", one.ID, out)
	}
	l.execOn(ctx, two.ID, two.Host, "echo two > /root/f")
	// The SDK's data-plane checks of a single zeishd pass against a node.
	conn, err := l.client.Connect(ctx, two.ID)
	if err != nil {
		t.Fatal(err)
	}
	dataPlaneSuite(ctx, t, conn, "two")
	// The public endpoints that read the guest are served by its node,
	// through the control plane: the ports it listens on (reached on the
	// node's data plane), and errors with their codes.
	l.execOn(ctx, one.ID, one.Host, "busybox httpd -p 8000 -h /root")
	ports, err := l.client.Ports(ctx, one.ID)
	if err != nil {
		t.Fatal(err)
	}
	listening := false
	for _, p := range ports {
		if p.Port.Port == 8000 && p.Listening {
			listening = strings.HasPrefix(p.URL, "http://"+l.nodes[one.Host].Addr+api.DataPath+"/sandboxes/"+one.ID+"/ports/8000")
		}
	}
	if !listening {
		t.Fatalf("ports of %s through the control plane: %+v", one.ID, ports)
	}
	l.portsThroughReplica(ctx, one.ID)
	if _, err := l.client.GitStatus(ctx, one.ID); !errors.Is(err, errdefs.ErrNoGitRepo) {
		t.Fatalf("git status of a sandbox without git_repo through the control plane: %v", err)
	}
	l.consoleUploadOnCluster(ctx, one.ID, one.Host)
	l.e2bOnCluster(ctx)
	// File bytes go to the node too; the control plane serves no data
	// plane for a node's sandbox, even with a good token.
	conn, err = l.client.Connect(ctx, one.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.WriteFile(ctx, "/root/up", strings.NewReader("bytes via the node"), 0o644); err != nil {
		t.Fatal(err)
	}
	rc, err := conn.ReadFile(ctx, "/root/up")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "bytes via the node" {
		t.Fatalf("file read back: %q", got)
	}
	acc, err := l.client.Access(ctx, one.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	cp := &server{t: t, addr: l.control.Addr}
	if st := cp.do(t, "GET", api.DataPath+"/sandboxes/"+one.ID+"/files/list?path=/root", acc.Token, nil, nil); st != http.StatusBadRequest {
		t.Fatalf("the control plane's data plane for a node's sandbox: %d", st)
	}
	// Nor does another node, with the same token: it is signed with the
	// key of the sandbox's node, which no other node holds.
	wrong := "http://" + l.nodes[two.Host].Addr + api.DataPath + "/sandboxes/" + one.ID + "/files/list?path=/root"
	if st := cp.do(t, "GET", wrong, acc.Token, nil, nil); st != http.StatusUnauthorized {
		t.Fatalf("another node's data plane for %s: %d", one.ID, st)
	}

	// A snapshot's clones start on its sandbox's node, and a restore
	// rolls the sandbox back there.
	snap, err := l.client.CreateSnapshot(ctx, one.ID, zeish.CreateSnapshotRequest{Name: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	l.execOn(ctx, one.ID, one.Host, "echo changed > /root/f")
	sc, err := l.client.CloneSnapshot(ctx, one.ID, "s1", zeish.CloneRequest{Name: "from-s1"}, zeish.Wait())
	if err != nil {
		t.Fatal(err)
	}
	if c := sc.Sandboxes[0]; c.Host != one.Host {
		t.Fatalf("snapshot clone on %s, its snapshot's sandbox on %s", c.Host, one.Host)
	} else if out := l.execOn(ctx, c.ID, c.Host, "cat /root/f"); out != "one" {
		t.Fatalf("snapshot clone reads %q", out)
	} else if _, err := l.client.DeleteSandbox(ctx, c.ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.client.RestoreSnapshot(ctx, snap.ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}
	if out := l.execOn(ctx, one.ID, one.Host, "cat /root/f"); out != "one" {
		t.Fatalf("after restore: %q", out)
	}
	if err := l.client.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}

	// A fork lands on its parent's node.
	fork, err := l.client.CloneSandbox(ctx, two.ID, zeish.CloneRequest{Name: "two-kid"}, zeish.Wait())
	if err != nil {
		t.Fatal(err)
	}
	kid := fork.Sandboxes[0]
	t.Logf("fork on %s: parent paused %d ms", two.Host, fork.PauseMS)
	if kid.Host != two.Host {
		t.Fatalf("fork of %s (on %s) placed on %s", two.ID, two.Host, kid.Host)
	}
	if out := l.execOn(ctx, kid.ID, kid.Host, "cat /root/f"); out != "two" {
		t.Fatalf("fork's file: %q", out)
	}
	// Its node is full for three more; a create still goes to the other.
	var apiErr *zeish.APIError
	if _, err := l.client.CloneSandbox(ctx, two.ID, zeish.CloneRequest{Count: 3}); !errors.Is(err, errdefs.ErrNodeFull) || !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict {
		t.Fatalf("fork of 3 on a full node: %v", err)
	}
	three, err := l.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: "three", MemoryMiB: 256}, zeish.Wait())
	if err != nil {
		t.Fatal(err)
	}
	if three.Host != one.Host {
		t.Fatalf("create while %s is full placed on %s", two.Host, three.Host)
	}

	// kill -9 the node of two: its sandboxes are lost, the others work.
	lostNode := two.Host
	killed := time.Now()
	l.nodes[lostNode].Kill()
	l.waitNode(lostNode, false)
	for _, id := range []string{two.ID, kid.ID} {
		sb, err := l.client.WaitSandbox(ctx, id, zeish.WaitRequest{State: sandbox.StateError, TimeoutSeconds: 60})
		if err != nil || sb.State != sandbox.StateError || sb.ErrorCode != sandbox.ErrNodeLost {
			t.Fatalf("%s after its node was killed: %+v %v", id, sb, err)
		}
		if _, err := l.client.Access(ctx, id, 0); !errors.Is(err, errdefs.ErrInvalidState) {
			t.Fatalf("access to a lost sandbox: %v", err)
		}
	}
	t.Logf("kill -9 of %s → its sandboxes node_lost: %v (ZEISH_NODE_LOST_AFTER=4s)", lostNode, time.Since(killed).Round(100*time.Millisecond))
	if out := l.execOn(ctx, one.ID, one.Host, "cat /root/f"); out != "one" {
		t.Fatalf("the live node's sandbox: %q", out)
	}
	four, err := l.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: "four", MemoryMiB: 256}, zeish.Wait())
	if err != nil || four.Host == lostNode {
		t.Fatalf("a create with one node lost: %+v %v", four, err)
	}
	if _, err := l.client.DeleteSandbox(ctx, four.ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}
	// The lost sandboxes bill nothing while lost.
	running := func() float64 { return sandboxUsage(ctx, t, l.client, two.ID).RunningSeconds }
	before := running()
	time.Sleep(1500 * time.Millisecond)
	if after := running(); after != before {
		t.Fatalf("a lost sandbox is still billed: %v then %v running seconds", before, after)
	}

	// The node comes back: its VMs outlived it, the sandboxes run again.
	restarted := time.Now()
	if err := l.nodes[lostNode].Start(ctx); err != nil {
		t.Fatal(err)
	}
	l.waitNode(lostNode, true)
	for _, id := range []string{two.ID, kid.ID} {
		// A wait ends at error, which is where they are until the node
		// rejoins them: read until they run.
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			sb, err := l.client.GetSandbox(ctx, id)
			if err == nil && sb.State == sandbox.StateRunning && sb.ErrorCode == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s after its node came back: %+v %v", id, sb, err)
			}
		}
	}
	t.Logf("restart of %s → its sandboxes running again: %v", lostNode, time.Since(restarted).Round(100*time.Millisecond))
	// It found them again from its data dir (their VMs' private state is
	// there, not in the database) and the rows the control plane gave it.
	l.nodeHoldsNoDatabase(lostNode)
	for _, id := range []string{two.ID, kid.ID} {
		if _, err := os.Stat(filepath.Join(l.nodes[lostNode].DataDir, "vmstate", "sandboxes", id+".json")); err != nil {
			t.Fatalf("%s's private state on its node: %v", id, err)
		}
		if r := l.sharedRow(ctx, id); r.Handle != nil || r.Disk != "" || r.Kernel != "" || r.Gen != 0 {
			t.Fatalf("%s's row in the database holds its VM's private state: handle %s, disk %q, kernel %q, gen %d",
				id, r.Handle, r.Disk, r.Kernel, r.Gen)
		}
	}
	if out := l.execOn(ctx, two.ID, lostNode, "cat /root/f"); out != "two" {
		t.Fatalf("after rejoin: %q", out)
	}
	if out := l.execOn(ctx, kid.ID, lostNode, "cat /root/f"); out != "two" {
		t.Fatalf("fork after rejoin: %q", out)
	}

	// Drain: no new placements on a node, its sandboxes keep running.
	if st := l.do("POST", "/admin/nodes/"+one.Host+"/drain", nil); st != http.StatusOK {
		t.Fatalf("drain: %d", st)
	}
	five, err := l.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: "five", MemoryMiB: 128}, zeish.Wait())
	if err == nil && five.Host == one.Host {
		t.Fatalf("a create placed on draining %s", one.Host)
	}
	if err == nil {
		if _, err := l.client.DeleteSandbox(ctx, five.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.client.CloneSandbox(ctx, one.ID, zeish.CloneRequest{}); !errors.Is(err, errdefs.ErrNodeFull) {
		t.Fatalf("a fork on a draining node: %v", err)
	}
	if out := l.execOn(ctx, one.ID, one.Host, "cat /root/f"); out != "one" {
		t.Fatalf("a draining node's sandbox: %q", out)
	}
	if st := l.do("POST", "/admin/nodes/"+one.Host+"/undrain", nil); st != http.StatusOK {
		t.Fatalf("undrain: %d", st)
	}

	// kill -9 the replica in use: the other serves everything, and the
	// nodes heartbeat to it (none is lost after ZEISH_NODE_LOST_AFTER).
	l.controls[0].Kill()
	l.use(1)
	time.Sleep(6 * time.Second)
	for _, n := range l.listNodes() {
		if !n.Live {
			t.Fatalf("node %s lost after a replica died: %+v", n.ID, n)
		}
	}
	if out := l.execOn(ctx, kid.ID, kid.Host, "cat /root/f"); out != "two" {
		t.Fatalf("through the other replica: %q", out)
	}
	// Labels pin it to kid's node.
	six, err := l.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: "six", MemoryMiB: 128, Accel: "tcg",
		NodeLabels: map[string]string{"disk": "ssd", "rack": kid.Host}}, zeish.Wait())
	if err != nil {
		t.Fatalf("create through the other replica: %v", err)
	}
	if six.Host != kid.Host || six.NodeLabels["rack"] != kid.Host {
		t.Fatalf("create with node_labels rack=%s placed on %s (%v)", kid.Host, six.Host, six.NodeLabels)
	}
	if out := l.execOn(ctx, six.ID, six.Host, "uname -n"); out != "six" {
		t.Fatalf("the other replica's create: %q", out)
	}

	// A template built through the control plane runs on the node holding it.
	l.templateOnCluster(ctx)
}

// nodeHoldsNoDatabase checks node id's process was given no database URL
// and its data dir holds no secrets key (node protocol 2.3: the control
// plane is the only writer of the shared tables; docs/cluster.md).
func (l *lab) nodeHoldsNoDatabase(id string) {
	t := l.t
	t.Helper()
	z := l.nodes[id]
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", z.PID()))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range strings.Split(string(env), "\x00") {
		if strings.HasPrefix(v, "ZEISH_DATABASE_URL=") || strings.Contains(v, "postgres://") || strings.Contains(v, "postgresql://") {
			t.Fatalf("node %s's environment holds a database URL: %q", id, v)
		}
	}
	if _, err := os.Stat(filepath.Join(z.DataDir, "secrets.key")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("node %s's data dir holds secrets.key: %v", id, err)
	}
	if m, _ := filepath.Glob(filepath.Join(z.DataDir, "*.db")); len(m) > 0 {
		t.Fatalf("node %s keeps a database of its own: %v", id, m)
	}
}

// sharedRow reads sandbox id's row in the cluster's database, as the
// control plane keeps it (its secrets left sealed).
func (l *lab) sharedRow(ctx context.Context, id string) *store.SandboxRecord {
	l.t.Helper()
	st, err := postgres.Open(ctx, l.db)
	if err != nil {
		l.t.Fatal(err)
	}
	defer st.Close()
	r, err := st.GetSandbox(ctx, id)
	if err != nil {
		l.t.Fatal(err)
	}
	return r
}

// burst fires 20 creates at once for a new account, alternating between the
// two replicas: the running-slot quota is counted in the database, so
// exactly clusterSlots of them are admitted and the rest get
// running_slots_full. It deletes what it made.
func (l *lab) burst(ctx context.Context) {
	t := l.t
	t.Helper()
	acct, err := l.client.CreateAccount(ctx, "burst")
	if err != nil {
		t.Fatal(err)
	}
	key, err := l.client.CreateAPIKey(ctx, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	var clients []*zeish.Client
	for _, z := range l.controls {
		clients = append(clients, zeish.NewClient("http://"+z.Addr+api.BasePath, key.Key))
	}
	const n = 20
	type result struct {
		sb  zeish.Sandbox
		err error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			sb, err := clients[i%len(clients)].CreateSandbox(ctx, zeish.CreateSandboxRequest{MemoryMiB: 128})
			results <- result{sb, err}
		}()
	}
	var made []zeish.Sandbox
	refused := 0
	var other []error
	for range n {
		r := <-results
		switch {
		case r.err == nil:
			made = append(made, r.sb)
		case errors.Is(r.err, errdefs.ErrRunningSlots):
			refused++
		default:
			other = append(other, r.err)
		}
	}
	defer func() {
		for _, sb := range made {
			if _, err := clients[0].DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
				t.Errorf("delete %s: %v", sb.ID, err)
			}
		}
	}()
	if len(made) != clusterSlots || refused != n-clusterSlots || len(other) > 0 {
		t.Fatalf("%d concurrent creates through %d replicas with %d running slots: %d made, %d running_slots_full, others: %v",
			n, len(clients), clusterSlots, len(made), refused, other)
	}
	// (Admission is the point: they are deleted while they boot, which
	// spares the shared CPU six TCG boots at once.)
	list, err := clients[1].ListSandboxes(ctx, zeish.ListOptions{})
	if err != nil || len(list) != clusterSlots {
		t.Fatalf("the account lists %d sandboxes (%v), want %d", len(list), err, clusterSlots)
	}
	t.Logf("%d concurrent creates through %d replicas: %d admitted (running slots %d), %d running_slots_full", n, len(clients), len(made), clusterSlots, refused)
}

// The host names a cluster's sandboxes' ports are reached by (zeish's
// P-<id>.<domain>, E2B's <port>-<id>.<domain>) name the control plane.
const (
	clusterDomain    = "zeish.test"
	clusterE2BDomain = "e2b.test"
)

// portsThroughReplica asks for port 8000 of sandbox id through a
// control-plane replica, which hands guest-port traffic to the sandbox's
// node: by path, by zeish's host name and by E2B's. This cluster's nodes
// run without guest networking (no network namespace of their own), so the
// node's own answer — 409 invalid_state, "has no network" — is what proves
// the hand-off (a replica alone answered 400: ports are served by the
// node); the node's port proxy into a networked guest is TestNetwork's.
func (l *lab) portsThroughReplica(ctx context.Context, id string) {
	t := l.t
	get := func(host, path, token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.control.Addr+path, nil)
		if host != "" {
			req.Host = host
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s %s: %v", host, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	byPath := api.DataPath + "/sandboxes/" + id + "/ports/8000/f"
	if st, _ := get("", byPath, ""); st != http.StatusUnauthorized {
		t.Fatalf("a private port through the replica without a token: %d, want 401", st)
	}
	acc, err := l.client.Access(ctx, id, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	dns := strings.Replace(id, "_", "-", 1)
	for _, c := range []struct{ host, path string }{
		{"", byPath},
		{"8000-" + dns + "." + clusterDomain, "/f"},
		{"8000-" + dns + "." + clusterE2BDomain, "/f"},
	} {
		st, body := get(c.host, c.path, acc.Token)
		if st != http.StatusConflict || !strings.Contains(body, `"invalid_state"`) || !strings.Contains(body, "has no network") {
			t.Fatalf("port 8000 through the replica, host %q path %s: %d %s; want the node's 409 invalid_state (no network)", c.host, c.path, st, body)
		}
	}
}
