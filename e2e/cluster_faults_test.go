package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// TestClusterImageStoreFaults runs a control plane and three node agents
// on PostgreSQL with a real S3 server (versitygw) as their image store,
// and real VMs, and takes the store and the disks away (issue 29's "bad
// input" proofs; docs/images.md, "When the store is away"):
//   - the store down: a create on a node that holds its template works;
//     a snapshot's clone and a start that need a fetch fail unavailable,
//     naming the store in the control plane's log, leaving no row, VM,
//     image folder or temp file; captures go on, and their uploads catch
//     up once the store is back (durable true), so the stopped sandbox
//     then starts on another node;
//   - a full disk on the fetching node (its data dir on a small tmpfs the
//     test mounts and fills): the fetch fails saying the disk is full (the
//     clone's child, recorded before its fetch, is error), the partial
//     fetch removed, the node still serving once room is made;
//   - a control plane and a node (re)started while the store is down start,
//     saying so; with wrong credentials they refuse to start, saying to
//     check the store's credentials.
//
// (A node of an older protocol is internal/cluster's
// TestPreviousMinorNodeRegisters and TestRouterAsksOnlyWhatTheNodesVersionHas.)
func TestClusterImageStoreFaults(t *testing.T) {
	began := time.Now()
	ctx := ctxFor(t, 15*time.Minute)
	testenv.RequireQEMU(t)
	s3 := testenv.StartS3(t)
	bucket := s3.NewBucket(t)
	storeURL := fmt.Sprintf("s3://%s/images/?endpoint=%s", bucket, s3.Endpoint)
	creds := []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey}
	storeEnv := append(slices.Clone(creds), "ZEISH_IMAGE_STORE="+storeURL)
	// node-c's data dir is a small tmpfs, unmounted after the cluster is
	// gone (cleanups run last first).
	cDir := smallDataDir(t, 64)
	l := startCluster(t, 4*time.Second, 1, append(storeEnv, "ZEISH_PLAN_RUNNING_SLOTS=16")...)
	nodeEnv := append(slices.Clone(storeEnv), "ZEISH_READY_VMS=0")
	l.addNodeEnv("node-a", 5*imagesMemMiB+imagesMemMiB/2, nodeEnv...)
	l.addNodeEnv("node-b", 3*imagesMemMiB+imagesMemMiB/2, nodeEnv...)
	c := l.nodeAgent("node-c", cDir, 3*imagesMemMiB+imagesMemMiB/2, nodeEnv...)
	l.nodes["node-c"] = c
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	l.waitNode("node-c", true)

	// The sandboxes of node-a the subtests start elsewhere: snapped (its
	// snapshot's clones), stopped (stopped while the store is down).
	l.only("node-a")
	var sbs [2]zeish.Sandbox
	var conns [2]*zeish.SandboxConn
	for i, name := range []string{"snapped", "stopped"} {
		sb, err := l.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: name, MemoryMiB: imagesMemMiB}, zeish.Wait())
		if err != nil || sb.Host != "node-a" {
			t.Fatalf("%s: %+v %v", name, sb, err)
		}
		sbs[i], conns[i] = sb, l.connect(ctx, sb)
		shell(t, conns[i], "echo "+name+" > /root/file; sync")
	}
	aImages := imageDirs(t, l.nodes["node-a"].DataDir)
	snap, err := l.client.CreateSnapshot(ctx, sbs[0].ID, zeish.CreateSnapshotRequest{Name: "before"})
	if err != nil {
		t.Fatal(err)
	}
	snapImages := newEntries(aImages, imageDirs(t, l.nodes["node-a"].DataDir))
	if len(snapImages) == 0 {
		t.Fatal("the snapshot made no image folder on node-a")
	}
	waitDurable(ctx, t, l, func() *bool {
		s, err := l.client.GetSnapshot(ctx, snap.ID)
		if err != nil {
			t.Fatal(err)
		}
		return s.Durable
	}, "the snapshot")

	t.Run("the store down", func(t *testing.T) {
		s3.Down()
		downAt := time.Now()
		// Captures go on: their uploads wait for the store.
		snap2, err := l.client.CreateSnapshot(ctx, sbs[0].ID, zeish.CreateSnapshotRequest{Name: "while-down"})
		if err != nil {
			t.Fatalf("a snapshot with the store down: %v", err)
		}
		if snap2.Durable != nil && *snap2.Durable {
			t.Fatal("a snapshot taken with the store down shows durable")
		}
		if _, err := l.client.StopSandbox(ctx, sbs[1].ID, zeish.Wait()); err != nil {
			t.Fatalf("a stop with the store down: %v", err)
		}
		// Hosts (re)started while the store is away start, saying so: an
		// outage of the store keeps no control plane or node down.
		spare := l.spareControl(t, storeEnv...)
		b := l.nodes["node-b"]
		b.Stop()
		for what, z := range map[string]*testenv.Zeishd{"a control plane": spare, "node-b": b} {
			mark := len(z.Log.String())
			if err := z.Start(ctx); err != nil {
				t.Fatalf("%s started while the store is down: %v", what, err)
			}
			if !strings.Contains(z.Log.String()[mark:], "cannot be reached at start") {
				t.Errorf("%s started while the store is down does not say so:\n%s", what, z.Log.String()[mark:])
			}
		}
		spare.Stop()
		l.waitNode("node-b", true)
		// What needs a fetch fails, saying why; node-a holds the images
		// but takes nothing new.
		l.only("node-b")
		before := l.footprint(ctx)
		logMark := len(l.control.Log.String())
		if _, err := l.client.CloneSnapshot(ctx, sbs[0].ID, snap.ID, zeish.CloneRequest{Name: "clone-down"}, zeish.Wait()); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("a snapshot's clone on a node that must fetch it, the store down: %v, want unavailable", err)
		}
		if _, err := l.client.StartSandbox(ctx, sbs[1].ID, zeish.Wait()); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("a start on a node that must fetch it, the store down: %v, want unavailable", err)
		}
		// A 5xx's body has a fixed sentence; the operator's log says why,
		// naming the store.
		if log := l.control.Log.String()[logMark:]; !strings.Contains(log, "s3://"+bucket+"/images/") || !strings.Contains(log, "cannot be reached") {
			t.Fatalf("the control plane's log after the refusals does not name the unreachable store:\n%s", log)
		}
		l.footprint(ctx).same(t, before, snapImages)
		if sb, err := l.client.GetSandbox(ctx, sbs[1].ID); err != nil || sb.State != sandbox.StateStopped || sb.Host != "node-a" {
			t.Fatalf("the stopped sandbox after a refused start: %+v %v", sb, err)
		}
		// A create from a template the node holds needs no store.
		sb, err := l.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{MemoryMiB: imagesMemMiB}, zeish.Wait())
		if err != nil || sb.Host != "node-b" || sb.State != sandbox.StateRunning {
			t.Fatalf("a create of the base template on node-b, the store down: %+v %v", sb, err)
		}
		if out := shell(t, l.connect(ctx, sb), "echo up"); out != "up" {
			t.Fatalf("exec in it: %q", out)
		}
		if _, err := l.client.DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
		t.Logf("the store was down %v", time.Since(downAt).Round(100*time.Millisecond))

		// Back: the uploads catch up, and the stopped sandbox starts on
		// another node from its now durable image.
		s3.Up(t)
		back := time.Now()
		waitDurable(ctx, t, l, func() *bool {
			s, err := l.client.GetSnapshot(ctx, snap2.ID)
			if err != nil {
				t.Fatal(err)
			}
			return s.Durable
		}, "the snapshot taken while the store was down")
		waitDurable(ctx, t, l, func() *bool {
			sb, err := l.client.GetSandbox(ctx, sbs[1].ID)
			if err != nil {
				t.Fatal(err)
			}
			return sb.ImageDurable
		}, "the sandbox stopped while the store was down")
		t.Logf("uploads made while the store was down durable %v after it came back", time.Since(back).Round(100*time.Millisecond))
		sb, err = l.client.StartSandbox(ctx, sbs[1].ID, zeish.Wait())
		if err != nil || sb.State != sandbox.StateRunning || sb.Host != "node-b" {
			t.Fatalf("the start on node-b once the store is back: %+v %v", sb, err)
		}
		if got := shell(t, l.connect(ctx, sb), "cat /root/file"); got != "stopped" {
			t.Fatalf("its file on node-b: %q", got)
		}
		if err := l.client.DeleteSnapshot(ctx, snap2.ID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a full disk on the fetching node", func(t *testing.T) {
		l.only("node-c")
		// Leave node-c's disk less room than the snapshot's disk layer
		// takes, so its fetch runs out of room part way.
		layer := allocated(t, l.nodes["node-a"].DataDir, snapImages)
		filler := fillDisk(t, cDir, layer/4)
		before := l.footprint(ctx)
		// The children of a clone on another node are recorded before the
		// fetch, which shows in their events (remote starts since
		// xnode29): the child that cannot be fetched is error, saying the
		// disk is full, and the fetch leaves nothing behind.
		_, err := l.client.CloneSnapshot(ctx, sbs[0].ID, snap.ID, zeish.CloneRequest{Name: "clone-full"}, zeish.Wait())
		if err == nil || !strings.Contains(err.Error(), "the disk is full") {
			t.Fatalf("a snapshot's clone on a node whose disk is full (layer %d KiB): %v, want it to fail saying the disk is full", layer>>10, err)
		}
		cloneErr := err.Error()
		kid, err := l.client.GetSandbox(ctx, "clone-full")
		if err != nil || kid.State != sandbox.StateError || kid.Host != "node-c" || !strings.Contains(kid.StateReason, "the disk is full") {
			t.Fatalf("the child whose fetch found the disk full: %+v %v", kid, err)
		}
		if strings.Contains(kid.StateReason, cDir) || strings.Contains(cloneErr, cDir) {
			t.Fatalf("the client sees the node's data dir %s: %q / %s", cDir, kid.StateReason, cloneErr)
		}
		t.Logf("the child: %s %s: %s", kid.State, kid.ErrorCode, kid.StateReason)
		l.footprint(ctx).sameFiles(t, before, snapImages)
		if _, err := l.client.DeleteSandbox(ctx, kid.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
		l.footprint(ctx).same(t, before, snapImages)
		// The node serves on: live, and once room is made, it fetches.
		l.waitNode("node-c", true)
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		res, err := l.client.CloneSnapshot(ctx, sbs[0].ID, snap.ID, zeish.CloneRequest{Name: "clone-room"}, zeish.Wait())
		if err != nil || res.Sandboxes[0].Host != "node-c" || res.Sandboxes[0].State != sandbox.StateRunning {
			t.Fatalf("the clone on node-c once it has room: %+v %v", res, err)
		}
		if got := shell(t, l.connect(ctx, res.Sandboxes[0]), "cat /root/file"); got != "snapped" {
			t.Fatalf("the clone's file: %q", got)
		}
		if _, err := l.client.DeleteSandbox(ctx, res.Sandboxes[0].ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("wrong credentials", func(t *testing.T) {
		wrong := []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey + "-wrong", "ZEISH_IMAGE_STORE=" + storeURL}
		control := l.spareControl(t, wrong...)
		node := l.nodeAgent("node-bad", tempDir(t, "zeish-e2e-node-bad-"), 512, wrong...)
		defer os.RemoveAll(node.DataDir)
		for what, z := range map[string]*testenv.Zeishd{"control plane": control, "node agent": node} {
			err := z.Start(ctx)
			z.Stop()
			if err == nil || !strings.Contains(err.Error(), "ZEISH_IMAGE_STORE") || !strings.Contains(err.Error(), "check the store's credentials") {
				t.Errorf("a %s with wrong store credentials: %v, want it to refuse to start saying to check the credentials", what, err)
			}
		}
		// It refused before it registered: it is not listed, never healthy.
		for _, n := range l.listNodes() {
			if n.ID == "node-bad" {
				t.Errorf("the node with wrong store credentials registered: %+v", n)
			}
		}
	})
	t.Logf("TestClusterImageStoreFaults: %v", time.Since(began).Round(time.Second))
}

// spareControl is one more control-plane replica of the lab's database,
// not started, with settings env; its data dir goes at cleanup.
func (l *lab) spareControl(t *testing.T, env ...string) *testenv.Zeishd {
	z := &testenv.Zeishd{Bin: filepath.Join(bin, "zeishd"), DataDir: tempDir(t, "zeish-e2e-control-spare-"),
		Env: append([]string{"ZEISH_ROLE=control", "ZEISH_DATABASE_URL=" + l.db, "ZEISH_CLUSTER_ALLOW_HTTP=on"}, env...)}
	t.Cleanup(func() { z.Stop(); os.RemoveAll(z.DataDir) })
	return z
}

// waitDurable waits until durable (what the API shows) is true.
func waitDurable(ctx context.Context, t *testing.T, l *lab, durable func() *bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		d := durable()
		if d != nil && *d {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			shown := "absent"
			if d != nil {
				shown = fmt.Sprint(*d)
			}
			t.Fatalf("%s not durable after 2 minutes (durable %s)", what, shown)
		}
	}
}

// footprint is what a refused operation must not change: the sandboxes,
// each node's VM processes and image folders, and fetches' temp files.
type footprint struct {
	sandboxes []string
	vms       map[string]int
	images    map[string][]string
	temps     []string
}

func (l *lab) footprint(ctx context.Context) footprint {
	l.t.Helper()
	list, err := l.client.ListSandboxes(ctx, zeish.ListOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	f := footprint{vms: map[string]int{}, images: map[string][]string{}}
	for _, sb := range list {
		f.sandboxes = append(f.sandboxes, sb.ID+" "+string(sb.State)+" "+sb.Host)
	}
	slices.Sort(f.sandboxes)
	for id, z := range l.nodes {
		f.vms[id] = len(procscan.Under(z.DataDir))
		f.images[id] = imageDirs(l.t, z.DataDir)
		filepath.WalkDir(z.DataDir, func(p string, _ os.DirEntry, err error) error {
			if err == nil && strings.Contains(filepath.Base(p), ".fetch-") {
				f.temps = append(f.temps, p)
			}
			return nil
		})
	}
	return f
}

// same fails t unless f is before, with no RAM file or temp file of the
// images in /dev/shm either.
func (f footprint) same(t *testing.T, before footprint, images []string) {
	t.Helper()
	if !slices.Equal(f.sandboxes, before.sandboxes) {
		t.Errorf("sandboxes after a refused operation: %v, before: %v", f.sandboxes, before.sandboxes)
	}
	f.sameFiles(t, before, images)
}

// sameFiles is same but for the sandboxes.
func (f footprint) sameFiles(t *testing.T, before footprint, images []string) {
	t.Helper()
	for id, n := range before.vms {
		if f.vms[id] != n {
			t.Errorf("VM processes of %s after a refused operation: %d, before: %d", id, f.vms[id], n)
		}
		if !slices.Equal(f.images[id], before.images[id]) {
			t.Errorf("image folders of %s after a refused operation: %v, before: %v", id, f.images[id], before.images[id])
		}
	}
	if len(f.temps) > 0 {
		t.Errorf("fetch temp files left: %v", f.temps)
	}
	for _, id := range images {
		if left, _ := filepath.Glob("/dev/shm/*zeish-img-" + id + ".mem.fetch-*"); len(left) > 0 {
			t.Errorf("RAM fetch temp files left: %v", left)
		}
	}
}

// imageDirs lists the image folders in a node's data dir.
func imageDirs(t *testing.T, dataDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, "images"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// newEntries is what after has that before had not.
func newEntries(before, after []string) []string {
	return slices.DeleteFunc(slices.Clone(after), func(s string) bool { return slices.Contains(before, s) })
}

// allocated is the bytes on disk of the largest disk layer of images in a
// node's data dir.
func allocated(t *testing.T, dataDir string, images []string) int64 {
	t.Helper()
	var most int64
	for _, id := range images {
		files, _ := filepath.Glob(filepath.Join(dataDir, "images", id, "disk*"))
		for _, f := range files {
			var st syscall.Stat_t
			if err := syscall.Stat(f, &st); err == nil {
				most = max(most, st.Blocks*512)
			}
		}
	}
	if most == 0 {
		t.Fatalf("no disk layer of images %v in %s", images, dataDir)
	}
	return most
}

// smallDataDir mounts a tmpfs of mib MiB for a node's data dir, unmounted
// at cleanup (after the node that uses it, when made before it).
func smallDataDir(t *testing.T, mib int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testskip.Skip(t, "mounting a tmpfs needs root")
	}
	dir := tempDir(t, "zeish-e2e-small-")
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm,mode=0700", mib), "zeish-e2e-small", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
			exec.Command("umount", "-l", dir).Run()
		}
		os.Remove(dir)
	})
	return dir
}

// fillDisk fills the file system of dir until room bytes are left, with
// one file it returns.
func fillDisk(t *testing.T, dir string, room int64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	size := (int64(st.Bavail)*st.Bsize - room) &^ 4095
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		t.Fatalf("fill %s with %d bytes: %v", dir, size, err)
	}
	return p
}
