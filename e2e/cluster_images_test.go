package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// imagesMemMiB is every sandbox's memory in TestClusterImages: a node's
// budget is a count of them.
const imagesMemMiB = 128

// TestClusterImages runs a control plane and three node agents on
// PostgreSQL with a real S3 server (versitygw) as their image store, and
// real VMs: images leave the host. A fork into 6 with placement any,
// whose parent's node fits 2 more, runs on 3 hosts, every child showing
// the parent's memory; a snapshot taken on a node killed with -9 is
// restored on another with its file and its running counter; a sandbox
// stopped on that lost node starts on another.
func TestClusterImages(t *testing.T) {
	began := time.Now()
	ctx := ctxFor(t, 25*time.Minute)
	s3 := testenv.StartS3(t)
	storeURL := fmt.Sprintf("s3://%s/images/?endpoint=%s", s3.NewBucket(t), s3.Endpoint)
	creds := []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey}
	l := startCluster(t, 4*time.Second, 1, append(creds, "ZEISH_IMAGE_STORE="+storeURL, "ZEISH_PLAN_RUNNING_SLOTS=16")...)
	node := func(id string, fits int) {
		l.addNodeEnv(id, fits*imagesMemMiB+imagesMemMiB/2, append(creds, "ZEISH_IMAGE_STORE="+storeURL, "ZEISH_READY_VMS=0")...)
	}
	// Room for 3 sandboxes each, and some for the images they keep.
	node("node-a", 3)
	node("node-b", 3)
	node("node-c", 3)
	// Drained nodes take nothing new: the parent goes to node-a.
	only := l.only
	all := func() { l.only("") }

	t.Run("a template built on one node, created from on another", func(t *testing.T) {
		only("node-a")
		tpl, err := l.client.WaitTemplate(ctx, l.uploadTemplate(ctx, t, "img").ID, nil)
		if err != nil || tpl.State != sandbox.TemplateReady || tpl.Host != "node-a" {
			t.Fatalf("template build on node-a: %+v %v", tpl, err)
		}
		only("node-c")
		// Its upload runs in the background: until it is whole in the
		// store, a create on node-c is refused as retryable (503
		// unavailable; the control plane's log says "not in the image
		// store yet": a 5xx body has a fixed sentence).
		var sb zeish.Sandbox
		built := time.Now()
		first := built
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
			sb, err = l.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Template: "img", MemoryMiB: imagesMemMiB}, zeish.Wait())
			if err == nil {
				break
			}
			if !errors.Is(err, errdefs.ErrNodeFull) && !errors.Is(err, errdefs.ErrUnavailable) || time.Now().After(deadline) {
				t.Fatalf("create from node-a's template on node-c: %v", err)
			}
			first = time.Now()
		}
		if sb.Host != "node-c" || sb.State != sandbox.StateRunning {
			t.Fatalf("a sandbox of node-a's template: %+v", sb)
		}
		firstTook := time.Since(first)
		metrics := scrape(t, l.nodes["node-c"].Addr)
		fetched := metricSum(metrics, "zeish_image_fetch_bytes_total")
		fetchTook := time.Duration(metricSum(metrics, `zeish_image_fetch_duration_seconds_sum{what="file"}`) * float64(time.Second))
		if fetched == 0 {
			t.Fatal("node-c fetched no bytes from the image store for node-a's template")
		}
		if out := shell(t, l.connect(ctx, sb), "id -u; pwd; echo $GREETING"); out != "1000\n/work\nhello from the image" {
			t.Fatalf("in the template's sandbox on node-c: %q", out)
		}
		cached := time.Now()
		again, err := l.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Template: "img", MemoryMiB: imagesMemMiB}, zeish.Wait())
		if err != nil || again.Host != "node-c" {
			t.Fatalf("a second create on node-c: %+v %v", again, err)
		}
		t.Logf("create from a template built on node-a, on node-c: refused %v while it uploaded; first create %v (its fetch: %.1f MiB in %v); cached %v",
			first.Sub(built).Round(10*time.Millisecond), firstTook.Round(10*time.Millisecond), fetched/(1<<20),
			fetchTook.Round(10*time.Millisecond), time.Since(cached).Round(10*time.Millisecond))
		for _, s := range []zeish.Sandbox{sb, again} {
			if _, err := l.client.DeleteSandbox(ctx, s.ID, zeish.Wait()); err != nil {
				t.Fatal(err)
			}
		}
		all()
	})

	t.Run("fork any", func(t *testing.T) {
		only("node-a")
		parent, err := l.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: "parent", MemoryMiB: imagesMemMiB}, zeish.Wait())
		if err != nil || parent.Host != "node-a" {
			t.Fatalf("parent: %+v %v", parent, err)
		}
		all()
		// What fits beside the parent, as placement sees it (saved images
		// count against a node's budget too).
		var fits int
		for _, n := range l.listNodes() {
			if n.ID == "node-a" {
				fits = n.FreeMiB / imagesMemMiB
			}
		}
		t.Logf("node-a fits %d children beside the parent", fits)
		if fits < 1 || fits > 3 {
			t.Fatalf("node-a fits %d", fits)
		}
		pconn := l.connect(ctx, parent)
		token := fmt.Sprintf("mem-%d", time.Now().UnixNano())
		shell(t, pconn, counterScript+" echo "+token+" > /dev/shm/token")
		// The default keeps every child on the parent's node: 6 do not fit.
		if _, err := l.client.CloneSandbox(ctx, parent.ID, zeish.CloneRequest{Count: 6}); !errors.Is(err, errdefs.ErrNodeFull) {
			t.Fatalf("a fork of 6 on a node that fits 2: %v, want node_full", err)
		}
		if _, err := l.client.CloneSandbox(ctx, parent.ID, zeish.CloneRequest{Count: 1, Placement: "nowhere"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("placement nowhere: %v", err)
		}
		forked := time.Now()
		res, err := l.client.CloneSandbox(ctx, parent.ID, zeish.CloneRequest{Count: 6, Placement: zeish.PlacementAny}, zeish.Wait())
		if err != nil {
			t.Fatalf("fork of 6 with placement any: %v", err)
		}
		t.Logf("fork of 6, placement any: %v to all running (parent paused %d ms)", time.Since(forked).Round(100*time.Millisecond), res.PauseMS)
		hosts := map[string]int{}
		for _, c := range res.Sandboxes {
			if c.State != sandbox.StateRunning {
				t.Fatalf("child %s on %s: %s %s", c.ID, c.Host, c.State, c.StateReason)
			}
			hosts[c.Host]++
			conn := l.connect(ctx, c)
			if got := shell(t, conn, "cat /dev/shm/token"); got != token {
				t.Fatalf("child %s on %s: memory %q, want the parent's %q", c.ID, c.Host, got, token)
			}
			requireCounting(t, conn, 1)
		}
		if len(res.Sandboxes) != 6 || len(hosts) != 3 || hosts["node-a"] != fits {
			t.Fatalf("children by host: %v, want 6 on 3 hosts, %d beside the parent", hosts, fits)
		}
		t.Logf("children by host: %v", hosts)
		for _, c := range append(res.Sandboxes, parent) {
			if _, err := l.client.DeleteSandbox(ctx, c.ID, zeish.Wait()); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("a lost node's snapshot and stopped sandbox", func(t *testing.T) {
		only("node-a")
		var conns [2]*zeish.SandboxConn
		var sbs [2]zeish.Sandbox
		for i, name := range []string{"snapped", "stopped"} {
			sb, err := l.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: name, MemoryMiB: imagesMemMiB}, zeish.Wait())
			if err != nil || sb.Host != "node-a" {
				t.Fatalf("%s: %+v %v", name, sb, err)
			}
			sbs[i], conns[i] = sb, l.connect(ctx, sb)
			shell(t, conns[i], counterScript+" echo "+name+" > /root/file")
		}
		all()
		time.Sleep(time.Second)
		at := counter(t, conns[0])
		snap, err := l.client.CreateSnapshot(ctx, sbs[0].ID, zeish.CreateSnapshotRequest{Name: "before"})
		if err != nil {
			t.Fatal(err)
		}
		shell(t, conns[0], "echo after > /root/file")
		if _, err := l.client.StopSandbox(ctx, sbs[1].ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
		// The uploads run in the background; the API says when each is durable.
		durable := time.Now()
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
			s, err := l.client.GetSnapshot(ctx, snap.ID)
			if err != nil {
				t.Fatal(err)
			}
			sb, err := l.client.GetSandbox(ctx, sbs[1].ID)
			if err != nil {
				t.Fatal(err)
			}
			if s.Durable == nil || sb.ImageDurable == nil {
				t.Fatalf("durable not shown with an image store: snapshot %v, stopped sandbox %v", s.Durable, sb.ImageDurable)
			}
			if *s.Durable && *sb.ImageDurable {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not durable after 3 minutes: snapshot %v, stopped sandbox %v", *s.Durable, *sb.ImageDurable)
			}
		}
		t.Logf("snapshot and stopped sandbox durable %v after", time.Since(durable).Round(100*time.Millisecond))

		l.nodes["node-a"].Kill()
		l.waitNode("node-a", false)
		if sb, err := l.client.WaitSandbox(ctx, sbs[0].ID, zeish.WaitRequest{State: sandbox.StateError, TimeoutSeconds: 60}); err != nil || sb.ErrorCode != sandbox.ErrNodeLost {
			t.Fatalf("the snapshotted sandbox after its node was killed: %+v %v", sb, err)
		}
		restored := time.Now()
		res, err := l.client.RestoreSnapshot(ctx, snap.ID, zeish.Wait())
		if err != nil {
			t.Fatalf("restore on another node: %v", err)
		}
		if res.Sandbox.State != sandbox.StateRunning || res.Sandbox.Host == "node-a" {
			t.Fatalf("restored: %+v", res.Sandbox)
		}
		t.Logf("restore of a lost node's snapshot on %s: %v", res.Sandbox.Host, time.Since(restored).Round(100*time.Millisecond))
		conn := l.connect(ctx, res.Sandbox)
		if got := shell(t, conn, "cat /root/file"); got != "snapped" {
			t.Fatalf("the file after the restore: %q", got)
		}
		requireCounting(t, conn, at)

		started := time.Now()
		sb, err := l.client.StartSandbox(ctx, sbs[1].ID, zeish.Wait())
		if err != nil || sb.State != sandbox.StateRunning || sb.Host == "node-a" {
			t.Fatalf("start of a sandbox stopped on a lost node: %+v %v", sb, err)
		}
		t.Logf("start of a lost node's stopped sandbox on %s: %v", sb.Host, time.Since(started).Round(100*time.Millisecond))
		conn = l.connect(ctx, sb)
		if got := shell(t, conn, "cat /root/file"); got != "stopped" {
			t.Fatalf("the file after the start elsewhere: %q", got)
		}
		requireCounting(t, conn, 1)
		// The fetches show in the nodes' metrics.
		var fetched bool
		for _, id := range []string{"node-b", "node-c"} {
			fetched = fetched || strings.Contains(scrape(t, l.nodes[id].Addr), "zeish_image_fetch_duration_seconds_count{what=\"file\"}")
		}
		if !fetched {
			t.Fatal("no fetch in the nodes' /metrics")
		}
		// node-a comes back: what moved is not its any more; its stale VMs go.
		if err := l.nodes["node-a"].Start(ctx); err != nil {
			t.Fatal(err)
		}
		l.waitNode("node-a", true)
		for _, id := range []string{sbs[0].ID, sbs[1].ID} {
			if sb, err := l.client.GetSandbox(ctx, id); err != nil || sb.Host == "node-a" || sb.State != sandbox.StateRunning {
				t.Fatalf("%s after its old node came back: %+v %v", id, sb, err)
			}
		}
	})
	t.Logf("TestClusterImages: %v", time.Since(began).Round(time.Second))
}

// connect opens the data plane of sb on its node.
func (l *lab) connect(ctx context.Context, sb zeish.Sandbox) *zeish.SandboxConn {
	l.t.Helper()
	conn, err := l.client.Connect(ctx, sb.ID)
	if err != nil {
		l.t.Fatalf("connect %s on %s: %v", sb.ID, sb.Host, err)
	}
	return conn
}

// scrape reads a process's /metrics.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metricSum adds the values of every series of metric name in a /metrics
// text.
func metricSum(text, name string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			var v float64
			if _, err := fmt.Sscan(rest[strings.LastIndexByte(rest, ' ')+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}
