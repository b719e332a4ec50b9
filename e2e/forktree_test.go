package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// TestForkTree grows a tree four deep through the public API — forks at
// every level, snapshots at two — and checks at every node: the process
// started at the root still counts; the memory each ancestor wrote before
// the fork is there, and what it writes after is not; random bytes and
// clocks diverge. Then it deletes the root and a middle node (no one else
// notices), restores a middle node's snapshot and forks it again, and kills
// zeishd with SIGKILL in the middle of a live capture: after the restart the
// sandbox runs on with its memory and disk, and nothing of the capture is
// left (the harness checks no process, image or RAM file outlives the test).
func TestForkTree(t *testing.T) {
	// One frozen layer at most: every re-forked sandbox has its disk
	// layers merged (node/merge.go), at every level.
	s := startServer(t, "ZEISH_DISK_LAYERS=1")
	ctx := ctxFor(t, 20*time.Minute)
	c := s.client

	type node struct {
		sb   sandbox.Sandbox
		conn *zeish.SandboxConn
		// blobs are the md5s of /dev/shm/m<level> (guest RAM) that this node
		// must see: written by it or its ancestors before each fork.
		blobs map[int]string
	}
	root, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "tree-0", MemoryMiB: 256}, zeish.Wait())
	if err != nil || root.State != sandbox.StateRunning {
		t.Fatalf("create root: %+v %v", root, err)
	}
	n0 := &node{sb: root, conn: connect(t, c, root.ID), blobs: map[int]string{}}
	shell(t, n0.conn, counterScript)
	started := counter(t, n0.conn)

	// md5Of is the md5 of /dev/shm/m<level> in n (md5sum's own exit status
	// counts: a missing file fails the test).
	md5Of := func(n *node, level int) string {
		t.Helper()
		sum, _, _ := strings.Cut(shell(t, n.conn, "md5sum /dev/shm/m"+strconv.Itoa(level)), " ")
		return sum
	}
	// setBlob makes /dev/shm/m<level> (tmpfs: guest RAM) in n what cmd
	// writes, with a copy on disk (/root/d<level>, synced: it goes into
	// the disk layers a fork freezes and merges), and records its md5.
	setBlob := func(n *node, level int, cmd string) {
		t.Helper()
		l := strconv.Itoa(level)
		shell(t, n.conn, cmd+" > /dev/shm/m"+l+" && cp /dev/shm/m"+l+" /root/d"+l+" && sync")
		n.blobs[level] = md5Of(n, level)
	}
	writeBlob := func(n *node, level int) { setBlob(n, level, "head -c 4000000 /dev/urandom") }
	requireBlobs := func(n *node) {
		t.Helper()
		for level, want := range n.blobs {
			if got := md5Of(n, level); got != want {
				t.Errorf("%s: /dev/shm/m%d md5 %s, want %s", n.sb.Name, level, got, want)
			}
			sum, _, _ := strings.Cut(shell(t, n.conn, "md5sum /root/d"+strconv.Itoa(level)), " ")
			if sum != want {
				t.Errorf("%s: /root/d%d md5 %s, want %s", n.sb.Name, level, sum, want)
			}
		}
	}
	random := func(n *node) string {
		return shell(t, n.conn, "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'")
	}
	// fork clones parent once and checks the child against it.
	fork := func(parent *node, name string) *node {
		t.Helper()
		resp, err := c.CloneSandbox(ctx, parent.sb.ID, api.CloneRequest{Name: name}, zeish.Wait())
		if err != nil || len(resp.Sandboxes) != 1 || resp.Sandboxes[0].State != sandbox.StateRunning {
			t.Fatalf("fork %s: %+v %v", parent.sb.Name, resp, err)
		}
		t.Logf("fork %s → %s: parent paused %d ms", parent.sb.Name, name, resp.PauseMS)
		child := &node{sb: resp.Sandboxes[0], conn: connect(t, c, resp.Sandboxes[0].ID), blobs: map[int]string{}}
		for k, v := range parent.blobs {
			child.blobs[k] = v
		}
		requireCounting(t, child.conn, started)
		requireCounting(t, parent.conn, started)
		requireBlobs(child)
		if a, b := random(parent), random(child); len(a) != 32 || a == b {
			t.Errorf("%s and %s read the same random bytes: %s", parent.sb.Name, name, a)
		}
		secs, _ := strconv.ParseInt(shell(t, child.conn, "date +%s"), 10, 64)
		if d := time.Since(time.Unix(secs, 0)); d < -10*time.Second || d > 10*time.Second {
			t.Errorf("%s's clock is %s off", name, d)
		}
		// What the parent writes from now on is its own.
		for level := range parent.blobs {
			setBlob(parent, level, "echo changed-"+name)
		}
		requireBlobs(child)
		return child
	}
	snapshot := func(n *node, name string) sandbox.Snapshot {
		t.Helper()
		snp, err := c.CreateSnapshot(ctx, n.sb.ID, zeish.CreateSnapshotRequest{Name: name})
		if err != nil {
			t.Fatalf("snapshot %s: %v", n.sb.Name, err)
		}
		requireCounting(t, n.conn, started)
		return snp
	}

	writeBlob(n0, 0)
	n1 := fork(n0, "tree-1") // a first fork: the root owns its RAM
	writeBlob(n1, 1)
	n2 := fork(n1, "tree-2") // a child re-forked: captured live
	snapshot(n1, "level-1")  // a snapshot of a child that was forked
	writeBlob(n2, 2)
	shell(t, n2.conn, "echo before > /root/snapmark")
	snp2 := snapshot(n2, "level-2")
	snapBlobs := map[int]string{} // n2's memory as the snapshot keeps it
	for k, v := range n2.blobs {
		snapBlobs[k] = v
	}
	shell(t, n2.conn, "echo after > /root/snapmark")
	n3 := fork(n2, "tree-3") // depth 3
	writeBlob(n3, 3)
	n4 := fork(n3, "tree-4") // depth 4
	for _, n := range []*node{n1, n2, n3, n4} {
		requireBlobs(n)
	}
	// The deep ones stand on one merged layer, and the merge holds what
	// every ancestor wrote to disk.
	for _, n := range []*node{n2, n3, n4} {
		requireMerged(t, s, n.sb.ID)
		requireBlobs(n)
	}

	// Deleting the root and a middle node harms no other.
	t.Log("deleting the root and a middle node harms no other")
	{
		for _, n := range []*node{n0, n1} {
			if _, err := c.DeleteSandbox(ctx, n.sb.ID, zeish.Wait()); err != nil {
				t.Fatalf("delete %s: %v", n.sb.Name, err)
			}
		}
		for _, n := range []*node{n2, n3, n4} {
			requireCounting(t, n.conn, started)
			requireBlobs(n)
		}
		// Level 3's descendants do not need it either.
		if _, err := c.DeleteSandbox(ctx, n3.sb.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
		requireCounting(t, n4.conn, started)
		requireBlobs(n4)
	}

	// Restore a middle node's snapshot and fork it again.
	t.Log("restore a middle node's snapshot and fork it again")
	{
		if _, err := c.RestoreSnapshot(ctx, snp2.ID, zeish.Wait()); err != nil {
			t.Fatalf("restore: %v", err)
		}
		n2.conn, n2.blobs = connect(t, c, n2.sb.ID), snapBlobs
		requireBlobs(n2)
		if got := shell(t, n2.conn, "cat /root/snapmark"); got != "before" {
			t.Fatalf("after restore /root/snapmark = %q, want before", got)
		}
		requireCounting(t, n2.conn, started)
		n5 := fork(n2, "tree-2b") // a fork of a restored sandbox
		if got := shell(t, n5.conn, "cat /root/snapmark"); got != "before" {
			t.Fatalf("fork of the restored sandbox: /root/snapmark = %q", got)
		}
		if _, err := c.DeleteSandbox(ctx, n5.sb.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
	}

	// Zeishd killed during a live capture.
	t.Log("zeishd killed during a live capture")
	{
		journal := filepath.Join(s.dataDir, "sandboxes", n4.sb.ID, "capture.json")
		done := make(chan error, 1)
		go func() {
			_, err := c.CloneSandbox(ctx, n4.sb.ID, api.CloneRequest{Name: "tree-crash"})
			done <- err
		}()
		var image string
		for deadline := time.Now().Add(2 * time.Minute); image == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if b, err := os.ReadFile(journal); err == nil {
				var j struct {
					Image string `json:"image"`
				}
				if json.Unmarshal(b, &j) == nil {
					image = j.Image
				}
			}
		}
		if image == "" {
			t.Fatal("the live capture never wrote its journal")
		}
		// Let the copy begin: a receiver runs (a migration), or the new
		// image's RAM file is being written (a capture by private pages,
		// which lasts ~0.1–0.2 s: look often).
		way := ""
		for deadline := time.Now().Add(time.Minute); way == "" && time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if len(procscan.Under(filepath.Join(s.dataDir, "images", image))) > 0 {
				way = "receiver running"
			} else if m, _ := filepath.Glob("/dev/shm/*" + image + "*.part"); len(m) > 0 {
				way = "private pages being copied"
			}
		}
		if way == "" {
			t.Fatal("the live capture's copy was never seen")
		}
		t.Logf("killing zeishd: %s", way)
		s.remember()
		s.zeishd.Kill()
		<-done // the request fails with the connection
		s.start()
		got, err := c.WaitSandbox(ctx, n4.sb.ID, api.WaitRequest{State: sandbox.StateRunning, TimeoutSeconds: 120})
		if err != nil || got.State != sandbox.StateRunning {
			t.Fatalf("after the crash: %+v %v", got, err)
		}
		n4.conn = connect(t, c, n4.sb.ID)
		requireCounting(t, n4.conn, started)
		requireBlobs(n4)
		if pids := procscan.Under(filepath.Join(s.dataDir, "images")); len(pids) > 0 {
			t.Errorf("capture helpers still run after recovery: %v", pids)
		}
		if _, err := os.Stat(journal); !os.IsNotExist(err) {
			t.Errorf("the journal is still there: %v", err)
		}
		if m, _ := filepath.Glob("/dev/shm/*" + image + "*"); len(m) > 0 {
			t.Errorf("the cut capture's RAM is left: %v", m)
		}
		if list, _ := c.ListSandboxes(ctx, zeish.ListOptions{}); len(list) > 0 {
			for _, sb := range list {
				if sb.Name == "tree-crash" && sb.State == sandbox.StateRunning {
					t.Errorf("a child of a capture that never finished runs: %+v", sb)
				}
			}
		}
		// It forks again, and its child has everything.
		n6 := fork(n4, "tree-after-crash")
		requireBlobs(n6)

		// Zeishd killed while disk layers are merged: a snapshot puts n6 on
		// one layer too many; 64 MiB written since make the merge last.
		t.Log("zeishd killed while disk layers are merged")
		shell(t, n6.conn, "yes zeish-merge | head -c 64000000 > /root/big && sync")
		big := shell(t, n6.conn, "md5sum < /root/big")
		// The merge starts as the snapshot returns: look at once.
		if _, err := c.CreateSnapshot(ctx, n6.sb.ID, zeish.CreateSnapshotRequest{Name: "before-merge-crash"}); err != nil {
			t.Fatal(err)
		}
		merging := ""
		for deadline := time.Now().Add(time.Minute); merging == "" && time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if m, _ := filepath.Glob(filepath.Join(s.dataDir, "images", "*", ".merge-*")); len(m) > 0 {
				merging = m[0]
			}
		}
		if merging == "" {
			t.Fatal("no merge started after the snapshot")
		}
		s.remember()
		s.zeishd.Kill()
		s.start()
		if got, err := c.WaitSandbox(ctx, n6.sb.ID, api.WaitRequest{State: sandbox.StateRunning, TimeoutSeconds: 120}); err != nil || got.State != sandbox.StateRunning {
			t.Fatalf("after the crash: %+v %v", got, err)
		}
		n6.conn = connect(t, c, n6.sb.ID)
		requireCounting(t, n6.conn, started)
		requireMerged(t, s, n6.sb.ID)
		requireBlobs(n6)
		if got := shell(t, n6.conn, "md5sum < /root/big"); got != big {
			t.Errorf("after the crash /root/big md5 %s, want %s", got, big)
		}
		if _, err := os.Stat(filepath.Dir(merging)); !os.IsNotExist(err) {
			t.Errorf("the cut merge's folder is left: %v", err)
		}
		n7 := fork(n6, "tree-after-merge-crash")
		if got := shell(t, n7.conn, "md5sum < /root/big"); got != big {
			t.Errorf("the fork after the crash: /root/big md5 %s, want %s", got, big)
		}
	}
}

// requireMerged waits until sandbox id stands on one merged disk layer
// (node/merge.go): its record lists one image, a merge, and its overlay's
// header names that image's layer.
func requireMerged(t *testing.T, s *server, id string) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		r := storedSandbox(t, s, id)
		if len(r.Layers) != 1 {
			last = fmt.Sprintf("layers %v", r.Layers)
			continue
		}
		layer := filepath.Join(s.dataDir, "images", r.Layers[0], "disk.qcow2")
		var meta struct {
			MergedFrom string `json:"merged_from"`
		}
		if b, err := os.ReadFile(filepath.Join(s.dataDir, "images", r.Layers[0], "image.json")); err != nil || json.Unmarshal(b, &meta) != nil || meta.MergedFrom == "" {
			last = fmt.Sprintf("layer %s is no merge (%v)", r.Layers[0], err)
			continue
		}
		out, err := exec.Command("qemu-img", "info", "-U", "--output=json", r.Disk).Output()
		var info struct {
			Backing string `json:"backing-filename"`
		}
		if err != nil || json.Unmarshal(out, &info) != nil || info.Backing != layer {
			last = fmt.Sprintf("overlay %s backed by %q (%v), want %s", r.Disk, info.Backing, err, layer)
			continue
		}
		return
	}
	t.Fatalf("%s never stood on one merged layer: %s", id, last)
}

// storedSandbox reads sandbox id's record from zeishd's store.
func storedSandbox(t *testing.T, s *server, id string) *store.SandboxRecord {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(s.dataDir, "zeish.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := st.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
