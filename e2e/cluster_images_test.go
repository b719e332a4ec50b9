package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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

// TestClusterImages runs a control plane and three node agents, each in a
// network namespace of its own, on PostgreSQL with a real S3 server
// (versitygw) as their image store, and real VMs: images leave the host. A fork into 6 with placement any,
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
	// Each node agent in a network namespace of its own: it reaches the
	// control plane and the store only through what the test forwards in.
	l.isolate = true
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

		// A snapshot of it, cloned with node-c drained: the child runs on
		// node-b, on node-b's own copy of the template (the image was
		// made on node-c's), with the snapshot's disk and processes, and
		// shows the image's fetch while it starts.
		conn := l.connect(ctx, sb)
		pid := shell(t, conn, tplStateScript)
		snap, err := l.client.CreateSnapshot(ctx, sb.ID, zeish.CreateSnapshotRequest{Name: "tpl"})
		if err != nil {
			t.Fatal(err)
		}
		shell(t, conn, "echo after > /home/app/state")
		only("node-b")
		// The nodes share this host's disk: node-b must not stand the
		// child on node-c's copy of the template, which on hosts of
		// their own it could not read.
		back := outOfReach(t, filepath.Join(l.nodes["node-c"].DataDir, "template-cache", tpl.ID))
		cloned := time.Now()
		res, err := l.client.CloneSnapshot(ctx, sb.ID, snap.ID, zeish.CloneRequest{Count: 1})
		if err != nil || len(res.Sandboxes) != 1 {
			t.Fatalf("clone of a snapshot of a template built in the cluster: %+v %v", res, err)
		}
		child, reasons := l.startReasons(ctx, t, res.Sandboxes[0].ID)
		back()
		if child.State != sandbox.StateRunning || child.Host != "node-b" {
			t.Fatalf("the snapshot's clone, wanted running on node-b: %+v", child)
		}
		t.Logf("clone on node-b of a snapshot taken on node-c of node-a's template: %v; its state_reasons: %q", time.Since(cloned).Round(10*time.Millisecond), reasons)
		requireTplState(t, l.connect(ctx, child), pid)
		if !fetchShown(reasons) {
			t.Errorf("the clone started from a fetched image and showed no fetch progress: %q", reasons)
		}
		for _, s := range []zeish.Sandbox{sb, again, child} {
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
		res, err := l.client.CloneSandbox(ctx, parent.ID, zeish.CloneRequest{Count: 6, Placement: zeish.PlacementAny})
		if err != nil {
			t.Fatalf("fork of 6 with placement any: %v", err)
		}
		// Every child followed while it starts, all at once: those on
		// other nodes than the parent's show the fork image's fetch.
		type followed struct {
			reasons []string
			err     error
		}
		starts := make([]followed, len(res.Sandboxes))
		var wg sync.WaitGroup
		for i, c := range res.Sandboxes {
			wg.Go(func() { res.Sandboxes[i], starts[i].reasons, starts[i].err = l.follow(ctx, c.ID) })
		}
		wg.Wait()
		t.Logf("fork of 6, placement any: %v to all running (parent paused %d ms)", time.Since(forked).Round(100*time.Millisecond), res.PauseMS)
		hosts := map[string]int{}
		for i, c := range res.Sandboxes {
			if err := starts[i].err; err != nil {
				t.Fatal(err)
			}
			if c.Host != "node-a" && !fetchShown(starts[i].reasons) {
				t.Errorf("child %s on %s started from the fetched fork image and showed no fetch progress: %q", c.ID, c.Host, starts[i].reasons)
			}
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
		// And one of the template node-a built, whose files are at
		// node-a's build folder there.
		tplSb, err := l.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: "tpl-snapped", Template: "img", MemoryMiB: imagesMemMiB}, zeish.Wait())
		if err != nil || tplSb.Host != "node-a" {
			t.Fatalf("tpl-snapped: %+v %v", tplSb, err)
		}
		tplPid := shell(t, l.connect(ctx, tplSb), tplStateScript)
		all()
		time.Sleep(time.Second)
		at := counter(t, conns[0])
		snap, err := l.client.CreateSnapshot(ctx, sbs[0].ID, zeish.CreateSnapshotRequest{Name: "before"})
		if err != nil {
			t.Fatal(err)
		}
		tplSnap, err := l.client.CreateSnapshot(ctx, tplSb.ID, zeish.CreateSnapshotRequest{Name: "before"})
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
			ts, err := l.client.GetSnapshot(ctx, tplSnap.ID)
			if err != nil {
				t.Fatal(err)
			}
			if s.Durable == nil || sb.ImageDurable == nil || ts.Durable == nil {
				t.Fatalf("durable not shown with an image store: snapshot %v, stopped sandbox %v", s.Durable, sb.ImageDurable)
			}
			if *s.Durable && *sb.ImageDurable && *ts.Durable {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not durable after 3 minutes: snapshot %v, stopped sandbox %v", *s.Durable, *sb.ImageDurable)
			}
		}
		t.Logf("snapshot and stopped sandbox durable %v after", time.Since(durable).Round(100*time.Millisecond))
		// One more snapshot while the store is paused: its upload cannot
		// finish before node-a dies.
		s3.Pause()
		late, err := l.client.CreateSnapshot(ctx, sbs[0].ID, zeish.CreateSnapshotRequest{Name: "late"})
		if err != nil {
			s3.Resume()
			t.Fatal(err)
		}

		l.nodes["node-a"].Kill()
		s3.Resume()
		l.waitNode("node-a", false)
		// Its disk is lost with it: the template node-a built (whose
		// files the nodes could read here, on one host) too, until it
		// comes back.
		back := outOfReach(t, filepath.Join(l.nodes["node-a"].DataDir, "template-builds"))
		if sb, err := l.client.WaitSandbox(ctx, sbs[0].ID, zeish.WaitRequest{State: sandbox.StateError, TimeoutSeconds: 60}); err != nil || sb.ErrorCode != sandbox.ErrNodeLost {
			t.Fatalf("the snapshotted sandbox after its node was killed: %+v %v", sb, err)
		}
		// Its restore is refused at once, saying why (not after
		// ZEISH_IMAGE_FETCH_WAIT's 5 minutes).
		refused := time.Now()
		_, err = l.client.RestoreSnapshot(ctx, late.ID, zeish.Wait())
		var apiErr *zeish.APIError
		if !errors.As(err, &apiErr) || apiErr.Code != "not_found" || !strings.Contains(apiErr.Message, "not yet durable") {
			t.Fatalf("restore of a lost node's snapshot that never became durable: %v; want not_found saying it was not yet durable", err)
		}
		t.Logf("restore of a lost node's snapshot that never became durable refused in %v: %s", time.Since(refused).Round(time.Millisecond), apiErr.Message)
		// It can be deleted while its node is lost (in the records: the
		// sweep then takes what nothing names).
		if err := l.client.DeleteSnapshot(ctx, late.ID); err != nil {
			t.Fatalf("delete of a lost node's snapshot: %v", err)
		}
		if _, err := l.client.GetSnapshot(ctx, late.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("the lost node's snapshot after its delete: %v", err)
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

		// The template's sandbox comes back on another node from its
		// snapshot, on that node's copy of the template, and shows the
		// image's fetch while it restores; the fetch counts in the
		// node's /metrics.
		before := map[string][2]float64{}
		for _, id := range []string{"node-b", "node-c"} {
			m := scrape(t, l.nodes[id].Addr)
			before[id] = [2]float64{metricSum(m, "zeish_image_fetch_bytes_total"), metricSum(m, `zeish_image_fetch_duration_seconds_count{what="file"}`)}
		}
		restored = time.Now()
		tres, err := l.client.RestoreSnapshot(ctx, tplSnap.ID)
		if err != nil {
			t.Fatalf("restore of a lost node's snapshot of its own template's sandbox: %v", err)
		}
		tsb, reasons := l.startReasons(ctx, t, tres.Sandbox.ID)
		if tsb.State != sandbox.StateRunning || tsb.Host == "node-a" {
			t.Fatalf("restored %s: %+v", tplSb.ID, tsb)
		}
		t.Logf("restore on %s of a lost node's snapshot of its template's sandbox: %v; its state_reasons: %q", tsb.Host,
			time.Since(restored).Round(100*time.Millisecond), reasons)
		requireTplState(t, l.connect(ctx, tsb), tplPid)
		if !fetchShown(reasons) {
			t.Errorf("the restore fetched its image and showed no fetch progress: %q", reasons)
		}
		m := scrape(t, l.nodes[tsb.Host].Addr)
		after := [2]float64{metricSum(m, "zeish_image_fetch_bytes_total"), metricSum(m, `zeish_image_fetch_duration_seconds_count{what="file"}`)}
		if was := before[tsb.Host]; after[0] <= was[0] || after[1] <= was[1] {
			t.Errorf("%s's fetch metrics did not count the restore's fetch: bytes %v → %v, files %v → %v", tsb.Host, was[0], after[0], was[1], after[1])
		}
		// node-a comes back: what moved is not its any more; its stale VMs go.
		back()
		if err := l.nodes["node-a"].Start(ctx); err != nil {
			t.Fatal(err)
		}
		l.waitNode("node-a", true)
		for _, id := range []string{sbs[0].ID, sbs[1].ID, tplSb.ID} {
			if sb, err := l.client.GetSandbox(ctx, id); err != nil || sb.Host == "node-a" || sb.State != sandbox.StateRunning {
				t.Fatalf("%s after its old node came back: %+v %v", id, sb, err)
			}
		}
	})
	t.Logf("TestClusterImages: %v", time.Since(began).Round(time.Second))
}

// tplStateScript leaves, in a sandbox of the "img" template (user app),
// state a restore or clone must bring back: a file, and a process running
// (it prints its pid).
const tplStateScript = "echo snapped > /home/app/state; sleep 100000 </dev/null >/dev/null 2>&1 & echo $!"

// requireTplState checks a sandbox restored or cloned from a snapshot taken
// after tplStateScript: the template's own file, the snapshot's file, and
// the process pid still running.
func requireTplState(t *testing.T, conn *zeish.SandboxConn, pid string) {
	t.Helper()
	if out := shell(t, conn, "cat /data/old/keep.txt /home/app/state; kill -0 "+pid+" && echo running"); out != "kept\nsnapped\nrunning" {
		t.Fatalf("in %s: %q, want the template's file, the snapshot's and its process", conn.ID(), out)
	}
}

// outOfReach hides path (a node's files the others must not use) until
// back is called, or the test ends.
func outOfReach(t *testing.T, path string) (back func()) {
	t.Helper()
	away := path + ".out-of-reach"
	if err := os.Rename(path, away); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	back = func() {
		once.Do(func() {
			if err := os.Rename(away, path); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(back)
	return back
}

// startReasons follows sandbox id's events while it is starting: the
// sandbox once it is not, and every state_reason the events showed.
func (l *lab) startReasons(ctx context.Context, t *testing.T, id string) (zeish.Sandbox, []string) {
	t.Helper()
	sb, reasons, err := l.follow(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return sb, reasons
}

// follow is startReasons without a test to fail.
func (l *lab) follow(ctx context.Context, id string) (zeish.Sandbox, []string, error) {
	stream, err := l.client.Events(ctx, id)
	if err != nil {
		return zeish.Sandbox{}, nil, err
	}
	defer stream.Close()
	var reasons []string
	for stream.Next() {
		sb := stream.Event().Sandbox
		if sb.StateReason != "" && !slices.Contains(reasons, sb.StateReason) {
			reasons = append(reasons, sb.StateReason)
		}
		if sb.State != sandbox.StateStarting {
			return sb, reasons, nil
		}
	}
	return zeish.Sandbox{}, reasons, fmt.Errorf("the events of %s ended while it started: %v (state_reasons %q)", id, stream.Err(), reasons)
}

// fetchShown reports whether a state_reason showed an image's fetch.
func fetchShown(reasons []string) bool {
	return slices.ContainsFunc(reasons, func(r string) bool { return strings.HasPrefix(r, "fetching image ") })
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
