package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/sparsecopy"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// TestColdImages: a snapshot's RAM that no VM maps leaves /dev/shm for the
// data dir's disk after ZEISH_COLD_AFTER (holes kept), and a clone of the
// snapshot and a start after restoring it bring it back: memory (a file in
// the guest's tmpfs) and a running process as they were.
func TestColdImages(t *testing.T) {
	s := startServer(t, "ZEISH_COLD_AFTER=2s")
	ctx := ctxFor(t, 15*time.Minute)
	c := s.client
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "coldbox", MemoryMiB: 256}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("create: %+v %v", sb, err)
	}
	conn := connect(t, c, sb.ID)
	shell(t, conn, counterScript+" echo cold-marker > /dev/shm/marker")
	before := counter(t, conn)
	had := testenv.ImageRAMFiles(s.dataDir)
	snap, err := c.CreateSnapshot(ctx, sb.ID, api.CreateSnapshotRequest{Name: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	var ram string // the snapshot's RAM file in /dev/shm
	for _, f := range testenv.ImageRAMFiles(s.dataDir) {
		if !slices.Contains(had, f) {
			ram = f
		}
	}
	if ram == "" {
		t.Fatal("the snapshot made no RAM file")
	}
	imgID := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(ram), "zeish-img-"), ".mem")
	cold := filepath.Join(s.dataDir, "images", imgID, "mem.cold")
	// Stopped, the sandbox maps nothing (its own memory is saved whole).
	if _, err := c.StopSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}
	waitCold := func(what string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			_, shmErr := os.Stat(ram)
			_, diskErr := os.Stat(cold)
			if os.IsNotExist(shmErr) && diskErr == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: image not moved to disk (tmpfs: %v, disk: %v)", what, shmErr, diskErr)
			}
			time.Sleep(200 * time.Millisecond)
		}
		fi, err := os.Stat(cold)
		if err != nil {
			t.Fatal(err)
		}
		alloc, _ := sparsecopy.Allocated(cold)
		t.Logf("%s: cold copy %d MiB allocated of %d MiB", what, alloc>>20, fi.Size()>>20)
		if fi.Size() != 256<<20 || alloc >= fi.Size() {
			t.Fatalf("%s: cold copy is %d bytes, %d allocated: want the guest's 256 MiB, sparse", what, fi.Size(), alloc)
		}
	}
	waitCold("snapshot of a stopped sandbox")

	t.Run("clone of a cold snapshot", func(t *testing.T) {
		kids, err := c.CloneSnapshot(ctx, sb.ID, snap.Name, zeish.CloneRequest{Name: "from-cold"}, zeish.Wait())
		if err != nil || len(kids.Sandboxes) != 1 {
			t.Fatalf("clone: %+v %v", kids, err)
		}
		kid := kids.Sandboxes[0]
		if _, err := os.Stat(ram); err != nil {
			t.Fatalf("clone runs but the image is not back in /dev/shm: %v", err)
		}
		kc := connect(t, c, kid.ID)
		if got := shell(t, kc, "cat /dev/shm/marker"); got != "cold-marker" {
			t.Fatalf("marker in the clone: %q", got)
		}
		requireCounting(t, kc, before)
		if _, err := c.DeleteSandbox(ctx, kid.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
	})
	waitCold("snapshot whose clone is gone")

	t.Run("restore a cold snapshot and start", func(t *testing.T) {
		if _, err := c.RestoreSnapshot(ctx, snap.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
		st, err := c.StartSandbox(ctx, sb.ID, zeish.Wait())
		if err != nil || st.State != sandbox.StateRunning {
			t.Fatalf("start: %+v %v", st, err)
		}
		conn := connect(t, c, sb.ID)
		if got := shell(t, conn, "cat /dev/shm/marker"); got != "cold-marker" {
			t.Fatalf("marker after restore: %q", got)
		}
		requireCounting(t, conn, before)
	})
	if !strings.Contains(s.logText(), "cold image back in memory") {
		t.Error("zeishd never logged bringing an image back")
	}
}
