package lazyram_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/blob"
	"github.com/zeish/zeish/internal/node/lazyram"
	"github.com/zeish/zeish/internal/testskip"
)

func TestMain(m *testing.M) {
	if os.Getenv("ZEISH_LAZYRAM_HELPER") != "" {
		helperMap()
		return
	}
	if p := os.Getenv("ZEISH_LAZYRAM_MAPPER"); p != "" {
		helperMapper(p)
		return
	}
	os.Exit(m.Run())
}

// helperMap is a zeishd that maps an image lazily and then waits to be
// killed: what a node that dies with VMs on lazy RAM leaves.
func helperMap() {
	ctx := context.Background()
	b, err := imagestore.OpenBackend(ctx, os.Getenv("STORE"))
	if err == nil {
		var r *lazyram.RAM
		if r, err = lazyram.Open(lazyram.Options{Dir: os.Getenv("DIR"), Backend: b, Holder: "helper"}); err == nil {
			var m *imagestore.Manifest
			if m, err = imagestore.New(b, imagestore.Options{}).Manifest(ctx, "img_lazy"); err == nil {
				err = r.Map(ctx, m, "mem", os.Getenv("LOCAL"))
			}
		}
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("mapped")
	select {}
}

// helperMapper maps file p privately as a VM maps its RAM (in a process
// of its own: a Go process that faults on pages of a FUSE file it serves
// itself can deadlock, its runtime waiting to stop a thread the fault
// holds), flips its first byte, says "mapped", and prints the mapping's
// digest at each line read from stdin; exits at EOF.
func helperMapper(p string) {
	f, err := os.Open(p)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fi, _ := f.Stat()
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE)
	f.Close()
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	mem[0] ^= 0xff
	fmt.Println("mapped")
	for in := bufio.NewScanner(os.Stdin); in.Scan(); {
		fmt.Printf("%x\n", sha256.Sum256(mem))
	}
}

// mapper maps p in a helper process; sum asks it for the digest of its
// mapping, stop ends it.
type mapper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startMapper(t *testing.T, p string) *mapper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ZEISH_LAZYRAM_MAPPER="+p)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &mapper{cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(m.stop)
	if line, err := m.out.ReadString('\n'); line != "mapped\n" {
		t.Fatalf("mapper: %q %v", line, err)
	}
	return m
}

func (m *mapper) sum(t *testing.T) string {
	t.Helper()
	fmt.Fprintln(m.in)
	line, err := m.out.ReadString('\n')
	if err != nil || strings.HasPrefix(line, "error") {
		t.Fatalf("mapper: %q %v", line, err)
	}
	return strings.TrimSpace(line)
}

func (m *mapper) stop() {
	if m.cmd.Process != nil {
		m.in.Close()
		m.cmd.Wait()
	}
}

// flipped is the digest of want with its first byte flipped, as a mapper
// sees it.
func flipped(want []byte) string {
	b := append([]byte(nil), want...)
	b[0] ^= 0xff
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

func requireFUSE(t *testing.T) {
	t.Helper()
	if err := lazyram.Available(); err != nil {
		testskip.Skip(t, "lazy RAM: %v", err)
	}
}

// image stores a RAM-shaped file (data pages, zero pages, holes) of size
// in a folder store.
func image(t *testing.T, size int64) (blob.Backend, string, *imagestore.Manifest, []byte) {
	t.Helper()
	ctx := context.Background()
	url := "file://" + t.TempDir()
	b, err := imagestore.OpenBackend(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	r := rand.New(rand.NewPCG(1, 2))
	for off := int64(0); off < size; off += 4096 {
		if r.IntN(3) != 0 {
			for i := off; i < off+4096; i++ {
				want[i] = byte(r.IntN(255) + 1)
			}
		}
	}
	src := filepath.Join(t.TempDir(), "mem")
	if err := os.WriteFile(src, want, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := imagestore.New(b, imagestore.Options{}).Upload(ctx, imagestore.UploadSpec{ID: "img_lazy",
		Files: []imagestore.SourceFile{{Name: "mem", Path: src}}})
	if err != nil {
		t.Fatal(err)
	}
	return b, url, m, want
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %s", what)
		}
	}
}

func keeperAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "keeper.pid"))
	if err != nil {
		return false
	}
	var pid int
	fmt.Sscan(string(b), &pid)
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// TestMapsLazilyThenLocal: a RAM file mapped lazily is a symlink into the
// mount whose bytes (read and privately mapped) are the image's; the
// prefetch swaps in a local copy with the same bytes while a mapping of
// the served file stays valid; once nothing maps it, the image is
// retired, the mount, its keeper and its chunk cache go.
func TestMapsLazilyThenLocal(t *testing.T) {
	requireFUSE(t)
	b, _, m, want := image(t, 24<<20)
	dir := t.TempDir()
	// The grace covers the mapper's start too.
	r, err := lazyram.Open(lazyram.Options{Dir: dir, Backend: b, Holder: "test", SweepEvery: 100 * time.Millisecond,
		Grace: 3 * time.Second, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	local := filepath.Join(t.TempDir(), "zeish-img-img_lazy.mem")
	if err := r.Map(context.Background(), m, "mem", local); err != nil {
		t.Fatal(err)
	}
	served := filepath.Join(r.Mount(), m.ID, "mem")
	if target, err := os.Readlink(local); err != nil && !isLocal(local) {
		t.Fatalf("local path after Map: %v", err)
	} else if err == nil && target != served {
		t.Fatalf("local path links to %s, want %s", target, served)
	}
	// A private mapping of the served file, as a VM's RAM.
	vm := startMapper(t, served)
	if got := vm.sum(t); got != flipped(want) {
		t.Fatal("the served file's mapping differs from the image")
	}
	if got, err := os.ReadFile(served); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the served file's bytes differ from the image (%v)", err)
	}
	waitFor(t, "the prefetch made the RAM local", func() bool { return isLocal(local) })
	if got, err := os.ReadFile(local); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the local copy differs from the image (%v)", err)
	}
	if n := testutil.ToFloat64(r.Metrics().Prefetches.WithLabelValues("done")); n != 1 {
		t.Fatalf("prefetches done: %v", n)
	}
	// Mapped: served still, past the grace.
	time.Sleep(3500 * time.Millisecond)
	if !lazyram.Mounted(r.Mount()) || len(r.Served()) != 1 {
		t.Fatalf("mapped image retired: mounted %v, served %v", lazyram.Mounted(r.Mount()), r.Served())
	}
	if got := vm.sum(t); got != flipped(want) {
		t.Fatal("the mapping changed under the swap")
	}
	vm.stop()
	waitFor(t, "the mount went once nothing mapped it", func() bool { return !lazyram.Mounted(r.Mount()) && len(r.Served()) == 0 })
	if keeperAlive(dir) {
		t.Fatal("the keeper outlived the mount")
	}
	if _, err := os.Stat(filepath.Join(dir, "cache")); !os.IsNotExist(err) {
		t.Fatalf("chunk cache left: %v", err)
	}
	if got, err := os.ReadFile(local); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the local copy after the unmount: %v", err)
	}
}

func isLocal(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode().IsRegular()
}

// TestTakesOverAfterACrash: a zeishd killed with SIGKILL while it serves
// an image leaves the mount and the keeper; the next Open takes the
// connection back (no unmount: a mapping made before the crash reads on),
// serves it, and tears it down once nothing maps it.
func TestTakesOverAfterACrash(t *testing.T) {
	requireFUSE(t)
	b, url, m, want := image(t, 8<<20)
	dir := t.TempDir()
	local := filepath.Join(t.TempDir(), "zeish-img-img_lazy.mem")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ZEISH_LAZYRAM_HELPER=1", "STORE="+url, "DIR="+dir, "LOCAL="+local)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "mapped\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %q", line)
	}
	mount := filepath.Join(dir, "mnt")
	served := filepath.Join(mount, m.ID, "mem")
	// Map before the crash; read after it.
	vm := startMapper(t, served)
	cmd.Process.Kill()
	cmd.Wait()
	if !lazyram.Mounted(mount) || !keeperAlive(dir) {
		t.Fatalf("after the crash: mounted %v, keeper %v", lazyram.Mounted(mount), keeperAlive(dir))
	}
	r, err := lazyram.Open(lazyram.Options{Dir: dir, Backend: b, Holder: "test", SweepEvery: 100 * time.Millisecond,
		Grace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := vm.sum(t); got != flipped(want) {
		t.Fatal("a mapping made before the crash reads other bytes after the takeover")
	}
	if len(r.Served()) != 1 {
		t.Fatalf("served after the takeover: %v", r.Served())
	}
	waitFor(t, "the RAM local after the takeover", func() bool { return isLocal(local) })
	vm.stop()
	waitFor(t, "the mount gone once nothing maps it", func() bool { return !lazyram.Mounted(mount) })
	if keeperAlive(dir) {
		t.Fatal("the keeper outlived the mount")
	}
}
