package qemu

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/vmm"
)

// captureLoops is how many more live captures of one VM
// TestLiveCaptureOfAClone makes back to back (-capture.loops N for a
// longer run, e.g. 50).
var captureLoops = flag.Int("capture.loops", 3, "live captures of one VM, back to back, in TestLiveCaptureOfAClone")

// TestLiveCaptureOfAClone runs the real base template with a process
// writing all the time in a clone (its RAM is an image's, mapped privately),
// captures that clone live twice and a grandchild once, and checks at every
// step: the source never stops counting and keeps its agent connection;
// each child starts where the source was at the switch-over, with the
// source's files written before it and none written after; the disk the
// source goes on writing is the new overlay, backed by the frozen one.
func TestLiveCaptureOfAClone(t *testing.T) {
	d := newTestDriver(t)
	d.deltaMaxMiB = -1 // migrations only: delta_test.go has the other way
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute+time.Duration(*captureLoops)*time.Minute)
	defer cancel()
	var joinedMu sync.Mutex
	joined := map[string]int{}
	d.joined = func(cgroup string) {
		joinedMu.Lock()
		joined[cgroup]++
		joinedMu.Unlock()
	}
	r := newCloneRig(ctx, t, d)
	src, sc, img := r.src, r.sc, r.img

	// A capture whose disk swap cannot be prepared (the frozen layer's
	// folder is missing) fails while its receiver is being launched beside
	// it: nothing of the receiver is left, and the source runs on, on its disk.
	r.failCapture()

	child, cc := r.captureLive("clone", src, sc, nil)
	_, _ = r.captureLive("clone again", src, sc, nil)
	r.captureLive("child of the clone", child, cc, nil)

	// Captures of one VM back to back: each receiver gets a cgroup no VMM
	// had before. Receivers were all "<id>.rcv", and one could join while
	// the last one's cgroup was still being removed (CI saw "pids.max: no
	// such device"). The source keeps counting throughout.
	for i := range *captureLoops {
		dir := t.TempDir()
		swap := vmm.DiskSwap{Frozen: filepath.Join(dir, "layer.qcow2"), Next: filepath.Join(filepath.Dir(src.Disk), "next-"+randomHex(3)+".qcow2")}
		loopImg, _, err := d.CaptureLive(ctx, src, dir, swap)
		if err != nil {
			t.Fatalf("capture %d of %d back to back: %v", i+1, *captureLoops, err)
		}
		os.Remove(loopImg.MemFile)
	}
	r.requireCounting("clone after back-to-back captures", sc)
	joinedMu.Lock()
	vmms := 0
	for cgroup, n := range joined {
		vmms += n
		if n > 1 {
			t.Errorf("cgroup %s joined by %d VMMs", cgroup, n)
		}
	}
	t.Logf("%d VMMs joined %d cgroups", vmms, len(joined))
	joinedMu.Unlock()

	// The clone's image stayed inflated for its captures while it runs, and
	// is made sparse again once the clone is gone.
	st, err := os.Stat(img.MemFile)
	if err != nil {
		t.Fatal(err)
	}
	// (Not quite all: the background sparsify of the parent's capture may
	// still punch a few zero pages after the inflation, which is harmless.)
	inflated := allocated(t, img.MemFile)
	t.Logf("image under a captured clone: %d of %d bytes allocated", inflated, st.Size())
	if inflated < st.Size()*9/10 {
		t.Errorf("image under a captured clone: %d of %d bytes allocated, want it inflated", inflated, st.Size())
	}
	if err := d.Destroy(ctx, src); err != nil {
		t.Fatal(err)
	}
	d.background.Wait()
	if got := allocated(t, img.MemFile); got >= inflated {
		t.Errorf("image after its captured clone is gone: %d of %d bytes allocated (%d before), want it sparse again", got, st.Size(), inflated)
	}

	// The receivers' RAM files are the images': nothing else is left in shm.
	d.background.Wait()
}
